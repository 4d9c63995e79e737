"""The running service's status: live state written into the store, the watchdog, metrics.

`edge-agent status` reads what `StatusWriter` writes, so it needs no socket into the service.
Writes only the live-state row; a store that cannot be written never stops the service here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from agent.core import wear
from agent.core.decide import Outcome
from agent.core.errors import StoreError
from agent.core.live import ServiceLive
from agent.service import process, sdnotify, status_record
from agent.service.recorder import Recorder
from agent.service.upstream_tasks import UpstreamTask
from agent.store.reserve import fs_free_bytes
from agent.store.store import Store

log = logging.getLogger(__name__)


def live_text(snapshot: dict[str, Any]) -> str:
    """The live state as JSON text by orjson (a tenth of json.dumps' time: at 1,200 connections
    10 ms of the event loop every 2 s, bench/gateway_scale.py); keys that are not text as text."""
    return orjson.dumps(snapshot, option=orjson.OPT_NON_STR_KEYS).decode()


OUTBOX_COUNT_EVERY_S = 15.0  # counting the outbox is not free on a big store


class StatusWriter:
    """Keeps `live` and the decision counts; writes them for `status` and the metrics endpoint."""

    def __init__(self, live: ServiceLive, now: Callable[[], str], interval_s: float) -> None:
        self.live = live
        self.now = now
        self.interval_s = interval_s
        self.decisions: dict[str, int] = {}
        self.collector: Any = None  # agent.service.metrics.SnapshotCollector when metrics are on
        self._outbox_counts: list[dict[str, Any]] = []
        self._counts_at = 0.0
        self._store_bytes = 0
        self._store_room: int | None = None
        self.max_size: int | None = None  # the store's configured max_size (its room is counted to it)
        self.identity: tuple[str, str] | None = None  # (site, gateway): status records are published
        self.status_every_s = 60.0
        self._status_at = -1e18
        self.process = process.mark()  # which process this is, so `status` knows when it is gone
        self.session = now()  # this process's status records and its MQTT Will name it
        self.write_budget: float | None = None  # store.write_budget, bytes per second
        self._writes = wear.WriteSamples()

    def count(self, outcomes: Sequence[Outcome]) -> None:
        """Count the decisions of one committed batch (arrivals by kind, for metrics)."""
        for oc in outcomes:
            self.decisions[oc.decision.value] = self.decisions.get(oc.decision.value, 0) + 1

    async def loop(
        self, store: Store, recorder: Recorder, forwarders: Sequence[UpstreamTask], stop: asyncio.Event
    ) -> None:
        """Write live state every few seconds and feed the systemd watchdog, until `stop`."""
        interval = sdnotify.watchdog_interval()
        while not stop.is_set():
            await self.write(store, recorder, forwarders)
            if interval is not None and recorder.healthy(max_commit_s=max(2 * interval, 10.0)):
                sdnotify.notify("WATCHDOG=1")
            wait = min(self.interval_s, interval or self.interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)

    def arm_wills(self, forwarders: Sequence[UpstreamTask]) -> None:
        """Give every sink that takes one the MQTT Will of this process (before it connects)."""
        if self.identity is None:
            return
        site, gateway = self.identity
        body = status_record.will(site=site, gateway=gateway, session=self.session)
        for f in forwarders:
            arm = getattr(getattr(f, "sink", None), "will_status", None)
            if arm is not None:
                arm(gateway, body)

    async def write(
        self, store: Store, recorder: Recorder, forwarders: Sequence[UpstreamTask], *, stopped: bool = False
    ) -> None:
        """One snapshot of the live state into the store (and to the metrics collector). `stopped`:
        the last one of a clean stop, whose status record (sent at once) says `stopped`."""
        self.live.upstreams = {f.upstream.name: asdict(f.state) for f in forwarders}
        self.live.recorder = {
            **asdict(recorder.stats),
            "backlog": recorder.backlog,
            "store_problem": recorder.store_problem,
        }
        written = process.written_bytes()
        if written is not None:
            self._writes.add(time.monotonic(), written)
        storage = wear.storage(written, store.commits, self._writes.rate(), self.write_budget)
        snapshot = {**self.live.snapshot(), "process": self.process, "storage": storage}
        try:
            await store.write_live_state("service", self.now(), live_text(snapshot))
        except StoreError as exc:  # a full disk must not stop the service; the recorder says it loudly
            log.debug("live state not written: %s", exc)
        status_due = self.identity is not None and (
            stopped or time.monotonic() - self._status_at >= self.status_every_s
        )
        if self.collector is not None or status_due:
            await self._refresh(store, force=status_due)
        if self.collector is not None:
            self.collector.snapshot = {
                **snapshot,
                "decisions": dict(self.decisions),
                "outbox": self._outbox_counts,
                "store_bytes": self._store_bytes,
                "store_room": self._store_room,
            }
        if status_due and self.identity is not None:
            self._status_at = time.monotonic()
            site, gateway = self.identity
            record = status_record.build(
                site=site,
                gateway=gateway,
                at=self.now(),
                now_s=time.time(),
                outbox=self._outbox_counts,
                store_room=self._store_room,
                connections=snapshot.get("connections", []),
                session=self.session,
                state="stopped" if stopped else "running",
            )
            await status_record.publish([f.sink for f in forwarders], gateway, record)

    async def _refresh(self, store: Store, *, force: bool) -> None:
        """Outbox counts (at most every OUTBOX_COUNT_EVERY_S unless forced), store size and room."""
        if force or time.monotonic() - self._counts_at > OUTBOX_COUNT_EVERY_S:
            self._outbox_counts = [asdict(c) for c in await store.outbox.counts()]
            self._counts_at = time.monotonic()
        paths = (Path(store.path), Path(store.path + "-wal"))
        self._store_bytes = sum(p.stat().st_size for p in paths if p.exists())
        try:
            free = await asyncio.to_thread(fs_free_bytes, store.path)
        except OSError:
            self._store_room = None
            return
        quota = None if self.max_size is None else max(0, self.max_size - self._store_bytes)
        self._store_room = free if quota is None else min(free, quota)
