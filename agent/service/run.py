"""The service: pollers, recorder, forwarders and housekeeping under one task group.

Wires the rooms together and owns the order of start and stop; holds no SQL, no protocol and
no stop bounds of its own (those are `agent.service.shutdown.StopBudget`).

Lifecycle (`edge-agent run`):
  start     take the process-wide settings of `agent.service.runtime`; open the store (a
            damaged store is moved aside and salvaged, see `open_store`), register upstreams,
            start recorder, pollers, forwarders, status writer and retention; READY=1 once
            all are started.
  running   one failing device or upstream never stops the rest: sources reconnect with
            backoff, forwarders back off, the recorder holds a batch while the store cannot
            be written. Each device connection, forwarder and the recorder runs under a
            supervisor (`agent.service.supervisor`): an unexpected exception is logged,
            counted and the task restarted. Pollers resume from the store's positions.
            WATCHDOG=1 only while the status loop runs and the recorder is not stuck
            inside one commit. A fatal store error stops the service (exit 74).
  SIGTERM   STOPPING=1; stop polling; let the recorder commit what was read; give the
            forwarders a bounded drain; close sinks; close the store; exit 0, or exit 75
            (EX_LOST) when observations read could not be committed (a full store even after
            its reserve was opened, or a step cut short): the log says how many.

The order matters: a poll in flight finishes and is committed before the store closes, so
what the controllers showed is never half recorded. Each step has its bound and the whole
sequence is bounded by `StopBudget.hard_stop_s`; a task is cancelled only when its bound has
passed (the last resort), and the log says what was cut short.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.config.loader import Config
from agent.config.retention import RetentionSettings
from agent.core.decide import Outcome
from agent.core.errors import StoreCorrupt, StoreError
from agent.core.live import ServiceLive
from agent.core.timestamps import format_timestamp
from agent.core.tracker import Resume
from agent.core.wording import counted
from agent.service import sdnotify
from agent.service.recorder import Recorder
from agent.service.room import StoreRoom
from agent.service.runtime import tuned_process
from agent.service.shutdown import STOP_BUDGET, StopBudget, StopSequence
from agent.service.signals import install_signal_handlers
from agent.service.status import StatusWriter
from agent.service.supervisor import FATAL_STORE_EXIT, Fatal, Supervisor
from agent.service.upstream_tasks import UpstreamTask, build_upstream_tasks
from agent.sources.pollers import run_pollers
from agent.store import live_file
from agent.store.prune import run_retention
from agent.store.reader import Reader
from agent.store.replace import finish_interrupted, replace_damaged
from agent.store.reserve import Reserve
from agent.store.salvage import SalvageReport
from agent.store.store import Store
from agent.store.wal_check import wal_damage

log = logging.getLogger(__name__)

EX_LOST = 75
"""Exit code of a stop that could not commit observations it had read (EX_TEMPFAIL): they are
counted in the log; the unit restarts the service, and the controllers' rings may hold them."""

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


async def open_store(
    path: str, cfg: Config, clock: Clock = utc_now
) -> tuple[Store, str | None, SalvageReport | None]:
    """Open the store; a damaged one is moved aside (database, WAL and SHM together) and a new
    store takes its place holding what could still be read from it (`agent.store.replace`),
    so a corrupt file never becomes a crash loop. Returns (store, alarm, salvage report)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    now = format_timestamp(clock())

    async def open_new(new_path: str) -> Store:
        return await Store.open(new_path, synchronous=cfg.store.synchronous)

    report = await finish_interrupted(path, open_new, now, _salvage_progress)
    alarm = (
        None if report is None else _salvage_alarm("a salvage interrupted by a crash was done again", report)
    )
    wal_alarm = await _check_wal(path, clock)
    alarm = "; ".join(a for a in (alarm, wal_alarm) if a) or None
    try:
        return await _open(path, cfg), alarm, report
    except StoreCorrupt as exc:
        stamp = clock().strftime("%Y%m%dT%H%M%SZ")
        log.error(
            "store was damaged (%s); moving it aside and salvaging what can be read into a new store", exc
        )
        moved, report = await replace_damaged(path, stamp, open_new, now, _salvage_progress)
        alarm = f"store was damaged ({exc}); moved aside to {', '.join(moved)}; a new store was started"
        if report is not None:
            alarm = _salvage_alarm(alarm, report)
        log.error("ALARM %s", alarm)
        return await _open(path, cfg), alarm, report


def _salvage_progress(rows: int) -> None:
    """Tell systemd the start goes on (a large backlog takes a while to salvage: 4,000-7,000
    rows a second measured, `bench/salvage.py`), so `TimeoutStartSec` does not kill it."""
    sdnotify.notify(
        f"EXTEND_TIMEOUT_USEC=60000000\nSTATUS=salvaging a damaged store: {rows} outbox rows taken"
    )


def _salvage_alarm(alarm: str, report: SalvageReport) -> str:
    log.error("ALARM salvage from %s: %s", report.damaged_file, report.summary())
    return f"{alarm}; {report.summary()}"


async def _check_wal(path: str, clock: Clock) -> str | None:
    """An alarm when the WAL holds commits SQLite will drop (`agent.store.wal_check`); the WAL
    is copied aside first, for analysis, since opening the store ends it."""
    wal = f"{path}-wal"
    damage = await asyncio.to_thread(wal_damage, wal)
    if damage is None:
        return None
    copy = f"{path}.wal-damaged-{clock().strftime('%Y%m%dT%H%M%SZ')}"
    try:
        await asyncio.to_thread(shutil.copyfile, wal, copy)
        kept = f"a copy of the WAL is at {copy}"
    except OSError as exc:
        kept = f"the WAL could not be copied aside ({exc})"
    alarm = f"store WAL was damaged: {damage.describe()}; {kept}"
    log.error("ALARM %s", alarm)
    return alarm


async def _open(path: str, cfg: Config) -> Store:
    """The store, its database held to `max_size - reserve` (see `agent.store.reserve`)."""
    quota = Reserve(path, cfg.store.reserve, cfg.store.max_size).database_quota
    return await Store.open(path, synchronous=cfg.store.synchronous, max_bytes=quota)


@dataclass
class _Running:
    """What runs between READY and the end of the stop sequence."""

    store: Store
    recorder: Recorder
    forwarders: list[UpstreamTask]
    stop_polling: asyncio.Event = field(default_factory=asyncio.Event)
    stop_recorder: asyncio.Event = field(default_factory=asyncio.Event)
    stop_forwarding: asyncio.Event = field(default_factory=asyncio.Event)
    stop_house: asyncio.Event = field(default_factory=asyncio.Event)
    recorder_tasks: list[asyncio.Task[None]] = field(default_factory=list)
    poller_tasks: list[asyncio.Task[None]] = field(default_factory=list)
    forwarder_tasks: list[asyncio.Task[None]] = field(default_factory=list)
    house_tasks: list[asyncio.Task[None]] = field(default_factory=list)


class Service:
    """Runs one gateway configuration until `stop` is set."""

    def __init__(
        self,
        cfg: Config,
        *,
        db: str | None = None,
        clock: Clock = utc_now,
        budget: StopBudget = STOP_BUDGET,
        status_interval_s: float = 2.0,
    ) -> None:
        self.cfg = cfg
        self.path = db or cfg.store.path
        self.clock = clock
        self.budget = budget
        self.live = ServiceLive(format_timestamp(clock()), os.getpid(), cfg.file)
        self.status = StatusWriter(self.live, self.now, status_interval_s)
        self.status.max_size, self.status.status_every_s = cfg.store.max_size, cfg.status_every
        self.status.write_budget = cfg.store.write_budget
        self.status.identity = (cfg.site, cfg.gateway) if cfg.upstreams else None
        self.ready = asyncio.Event()
        self.supervisor = Supervisor(Fatal(asyncio.Event()), tasks=self.live.tasks)
        self.resume: dict[str, Resume] = {}
        self.reserve = Reserve(self.path, cfg.store.reserve, cfg.store.max_size)
        self._recorder: Recorder | None = None

    def now(self) -> str:
        return format_timestamp(self.clock())

    async def run(self, stop: asyncio.Event) -> int:
        with tuned_process():  # the process-wide settings the service runs with
            return await self._serve(stop)

    async def _serve(self, stop: asyncio.Event) -> int:
        store, alarm, salvaged = await open_store(self.path, self.cfg, self.clock)
        self.live.store_problem = alarm
        self.live.salvage = salvaged.as_dict() if salvaged is not None else None
        await asyncio.to_thread(self.reserve.ensure)
        fatal = self.supervisor.fatal = Fatal(stop)  # a fatal store error ends this run
        stopping: StopSequence | None = None
        try:
            await store.register_upstreams([(u.name, u.backfill) for u in self.cfg.upstreams], self.now())
            self.resume = await resume_points(self.path, [d.name for d in self.cfg.devices])
            stopping = await self._run(store, stop)
        finally:
            await _close_store(store, stopping)
        if fatal.error is not None:
            log.critical("stopped after a fatal store error in %s: %s", fatal.task, fatal.error)
            return FATAL_STORE_EXIT
        lost = self._lost()
        if lost:
            log.error(
                "stopped with %d observations that could not be committed: lost to this store "
                "(the controllers' ring buffers may still hold them); exit %d",
                lost,
                EX_LOST,
            )
            return EX_LOST
        if stopping is not None and stopping.cut_short:
            log.warning("stopped; cut short: %s", ", ".join(stopping.cut_short))
        else:
            log.info("stopped cleanly")
        return 0

    def _lost(self) -> int:
        """Observations given up at the stop: counted by the recorder, or still in its hands."""
        rec = self._recorder
        return 0 if rec is None else rec.stats.lost + rec.uncommitted()

    async def _run(self, store: Store, stop: asyncio.Event) -> StopSequence:
        await self._place_live_state(store)
        running = self._prepare(store)
        async with asyncio.TaskGroup() as tg:
            self._start_tasks(tg, running)
            self._announce_ready()
            await stop.wait()
            stopping = await self._stop(running)
        await _close_sinks(running.forwarders, stopping)
        return stopping

    async def _place_live_state(self, store: Store) -> None:
        """The live state in a file in memory when there is a place for it (no flash writes every
        2 s, `agent.store.live_file`), else in the store; said once."""
        path = live_file.choose(store.store_id)
        try:
            await store.use_live_file(path)
        except StoreError as exc:  # a full store: the recorder says so loudly; status stays in the store
            log.warning("live state stays in the store: %s", exc)
            return
        if path is None:
            log.info("live state kept in the store (no runtime directory in memory: RUNTIME_DIRECTORY unset)")
        else:
            log.info("live state for `status` in %s (in memory)", path)

    def _prepare(self, store: Store) -> _Running:
        """Forwarders, the recorder that wakes them, and the metrics endpoint when configured."""
        cfg = self.cfg
        forwarders = build_upstream_tasks(store, cfg, self.live)
        self.status.arm_wills(forwarders)  # before any sink connects

        def committed(_batch: Any, outcomes: Sequence[Outcome]) -> None:
            self.status.count(outcomes)
            for f in forwarders:
                f.wake()

        if cfg.metrics is not None and cfg.metrics.listen:
            from agent.service import metrics  # prometheus-client is imported only when metrics are on

            self.status.collector = metrics.SnapshotCollector()
            metrics.serve(cfg.metrics.listen, self.status.collector)
        self._recorder = Recorder(
            store,
            on_commit=committed,
            room=StoreRoom(store, self.reserve),
            min_interval_s=cfg.store.commit_interval,
        )
        return _Running(store, self._recorder, forwarders)

    def _start_tasks(self, tg: asyncio.TaskGroup, r: _Running) -> None:
        cfg, sup = self.cfg, self.supervisor
        recorder = sup.run(
            "recorder", lambda: r.recorder.run(r.stop_recorder), r.stop_recorder, again_at_stop=True
        )
        r.recorder_tasks.append(tg.create_task(recorder, name="recorder"))
        pollers = run_pollers(
            cfg.devices,
            r.recorder,
            r.stop_polling,
            self.live,
            resume=self.resume,
            supervise=sup.run,
            alarm_memory=r.store.read_alarm_memory,
        )
        r.poller_tasks.append(tg.create_task(pollers, name="pollers"))
        for f in r.forwarders:
            name = f"forwarder[{f.upstream.name}]"

            def forward(f: UpstreamTask = f) -> Awaitable[None]:
                return f.run(r.stop_forwarding, drain_s=self.budget.drain_s)

            r.forwarder_tasks.append(tg.create_task(sup.run(name, forward, r.stop_forwarding), name=name))
        status = self.status.loop(r.store, r.recorder, r.forwarders, r.stop_house)
        r.house_tasks.append(tg.create_task(status, name="status"))
        retention = cfg.store.retention
        if isinstance(retention, RetentionSettings) and cfg.upstreams:
            prune = run_retention(r.store, retention, self.clock, r.stop_house)
            r.house_tasks.append(tg.create_task(prune, name="retention"))

    def _announce_ready(self) -> None:
        self.ready.set()
        sdnotify.notify(f"READY=1\nSTATUS=polling {counted(len(self.cfg.devices), 'device')}")
        log.info(
            "started devices=%d upstreams=%d store=%s pid=%d",
            len(self.cfg.devices),
            len(self.cfg.upstreams),
            self.path,
            os.getpid(),
        )

    async def _stop(self, r: _Running) -> StopSequence:
        """Stop in order, each step bounded: pollers, recorder, forwarders' drain, housekeeping."""
        b = self.budget
        sdnotify.notify("STOPPING=1")
        log.info(
            "stopping: polling stops, the recorder commits, forwarders drain for %.0fs (hard stop %.0fs)",
            b.drain_s,
            b.hard_stop_s,
        )
        stopping = StopSequence(b)
        r.stop_polling.set()
        await stopping.wait_tasks(r.poller_tasks, b.pollers_s, "pollers")
        r.stop_recorder.set()
        await stopping.wait_tasks(r.recorder_tasks, b.recorder_s, "recorder")
        r.stop_forwarding.set()
        await stopping.wait_tasks(r.forwarder_tasks, b.forwarders_s, "forwarders")
        last = self.status.write(r.store, r.recorder, r.forwarders, stopped=True)
        await stopping.step(last, b.close_s, "last status")
        r.stop_house.set()
        await stopping.wait_tasks(r.house_tasks, b.close_s, "status and retention")
        return stopping


async def _close_sinks(forwarders: Sequence[UpstreamTask], stopping: StopSequence) -> None:
    """Close every sink (each bounded by its own timeouts, all together by the stop budget)."""

    async def close_all() -> None:
        for f in forwarders:
            with contextlib.suppress(Exception):
                await f.sink.close()

    await stopping.step(close_all(), stopping.budget.close_s, "closing sinks")


async def _close_store(store: Store, stopping: StopSequence | None) -> None:
    """Close the store; after SIGTERM within what is left of the stop budget."""
    if stopping is None:
        await store.close()
        return
    await stopping.step(store.close(), stopping.budget.close_s, "closing the store")


async def resume_points(path: str, devices: Sequence[str]) -> dict[str, Resume]:
    """Where each device's pollers resume, read from the store on a read-only connection."""
    async with await Reader.open(path) as reader:
        points = await reader.resume_points(devices)
    for device, p in points.items():
        if p.boot is not None:
            log.info(
                "resuming device=%s boot_id=%s positions=%s ring_head=%s",
                device,
                p.boot,
                ",".join(f"{ch}:{tid}" for ch, tid in sorted(p.counters.items())) or "-",
                p.ring_head,
            )
    return points


async def serve(cfg: Config, *, db: str | None = None) -> int:
    """Entry point of `edge-agent run`: run until SIGTERM/SIGINT."""
    stop = asyncio.Event()
    install_signal_handlers(stop)
    return await Service(cfg, db=db).run(stop)
