"""Live state of a running service: per connection and per upstream, for `status` and metrics.

Plain data, no I/O. Sources and forwarders update these objects in place; the
service writes a snapshot into the store every few seconds (so `edge-agent
status` needs no socket into the service) and the metrics endpoint reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from agent.core.timestamps import format_timestamp


@dataclass
class ConnectionLive:
    """One connection of one device (a PLC reachable over two paths has two).

    The time of the last poll is kept as wall-clock seconds (``last_poll_s``, set on every
    poll) and written as text (``last_poll_at``) only when the state is read.
    """

    device: str
    receiver: str
    state: str = "connecting"  # connecting | up | unavailable | stopped
    last_poll_s: float | None = None
    boot_id: str | None = None
    polls: int = 0
    read_errors: int = 0
    last_error: str | None = None
    period_s: float | None = None  # the poll interval, when the loop polls on ticks
    ticks_missed: int = 0
    # What is wrong while the link is up, by what it concerns (e.g. "alarms": a refused
    # ConditionRefresh, "Trip": a Modbus exception): the source's current warnings, not a history.
    problems: dict[str, str] = field(default_factory=dict)

    @property
    def last_poll_at(self) -> str | None:
        at = self.last_poll_s
        return None if at is None else format_timestamp(datetime.fromtimestamp(at, UTC))

    def polled(self, at_s: float, boot_id: str | None) -> None:
        """A poll answered at `at_s` (wall clock, seconds since the Unix epoch).

        Ticks missed: the ticks that passed since the previous answer without one of their own (a
        read slower than the interval, or a link that was down), `round(gap / period) - 1`."""
        prev, period = self.last_poll_s, self.period_s
        if prev is not None and period and at_s > prev:
            self.ticks_missed += max(0, round((at_s - prev) / period) - 1)
        self.state, self.last_poll_s, self.polls = "up", at_s, self.polls + 1
        if boot_id is not None:
            self.boot_id = boot_id

    def snapshot(self) -> dict[str, Any]:
        # A shallow copy of the fields (plain values; `problems` copied), not `asdict`: its deep,
        # type-checking copy of 1,200 connections held the event loop for 60 ms every 2 s, enough
        # for each 10 Hz connection to miss a tick now and then (bench/gateway_scale.py).
        out = dict(vars(self))
        del out["last_poll_s"], out["period_s"]
        out["problems"] = dict(self.problems)
        out["last_poll_at"] = self.last_poll_at
        return out

    def failed(self, error: str) -> None:
        self.state, self.last_error, self.read_errors = "unavailable", error, self.read_errors + 1


@dataclass
class TaskLive:
    """One supervised task (a device connection, a forwarder, the recorder): its failures."""

    name: str
    state: str = "running"  # running | restarting | stopped
    failures: int = 0
    restarts: int = 0
    last_error: str | None = None

    def failed(self, error: str) -> None:
        self.state, self.failures, self.last_error = "restarting", self.failures + 1, error

    def restarted(self) -> None:
        self.state, self.restarts = "running", self.restarts + 1


@dataclass
class ServiceLive:
    """Everything `status` shows about a running service."""

    started_at: str
    pid: int
    config: str
    connections: list[ConnectionLive] = field(default_factory=list)
    upstreams: dict[str, dict[str, Any]] = field(default_factory=dict)
    recorder: dict[str, Any] = field(default_factory=dict)
    store_problem: str | None = None
    tasks: list[TaskLive] = field(default_factory=list)
    salvage: dict[str, Any] | None = None  # what a new store took from a damaged one at this start
    config_hash: str | None = None  # the configuration in force (agent.config.fingerprint)
    config_loaded_at: str | None = None  # when it was loaded (the start, or the last reload applied)
    last_reload: dict[str, Any] | None = None  # at, result (applied, invalid, refused), what it did
    reloads: dict[str, int] = field(default_factory=dict)  # reloads since the start, by result

    def connection(self, device: str, receiver: str) -> ConnectionLive:
        for c in self.connections:
            if (c.device, c.receiver) == (device, receiver):
                return c
        c = ConnectionLive(device, receiver)
        self.connections.append(c)
        return c

    def reloaded(self, at: str, result: str, detail: dict[str, Any]) -> None:
        """One reload's outcome (`agent.service.reload`): shown by `status`, counted for metrics."""
        self.last_reload = {"at": at, "result": result, **detail}
        self.reloads[result] = self.reloads.get(result, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        """The state as plain data (the status file, the metrics): shallow copies of what the
        service replaces wholesale (upstreams, recorder) and of each connection and task."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["connections"] = [c.snapshot() for c in self.connections]
        out["tasks"] = [dict(vars(t)) for t in self.tasks]
        out["upstreams"] = {k: dict(v) for k, v in self.upstreams.items()}
        out["reloads"] = dict(self.reloads)
        for key in ("recorder", "salvage", "last_reload"):
            if isinstance(out[key], dict):
                out[key] = dict(out[key])
        return out
