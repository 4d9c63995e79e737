"""The service: pollers, recorder, forwarders and housekeeping under one task group.

Wires the rooms together and owns the order of start and stop; holds no SQL, no protocol and
no stop bounds of its own (those are `agent.service.shutdown.StopBudget`).

Rules: READY=1 once every part started; one failing device or upstream never stops the rest
(each runs under `agent.service.supervisor`); WATCHDOG=1 only while the status loop runs and the
recorder is not stuck in a commit; a fatal store error stops the service (exit 74). On SIGTERM
the pollers stop first and the recorder commits what was read before the store closes, so what
the controllers showed is never half recorded; exit 75 when observations read could not be
committed. Every step has its bound inside `StopBudget.hard_stop_s`; a task is cancelled only
past its bound, and the log says what was cut short. The lifecycle step by step:
docs/architecture.md, "The service's lifecycle".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from typing import Any

from agent.config.fingerprint import fingerprint
from agent.config.loader import Config
from agent.config.retention import RetentionSettings
from agent.core.decide import Outcome
from agent.core.errors import StoreError
from agent.core.live import ServiceLive
from agent.core.timestamps import format_timestamp
from agent.core.tracker import Resume
from agent.core.wording import counted
from agent.service import sdnotify
from agent.service.recorder import Recorder
from agent.service.reload import Reloads
from agent.service.room import StoreRoom
from agent.service.running import Running, resume_points
from agent.service.runtime import tuned_process
from agent.service.shutdown import STOP_BUDGET, StopBudget, StopSequence
from agent.service.signals import install_signal_handlers
from agent.service.status import StatusWriter
from agent.service.store_open import Clock, open_store, utc_now
from agent.service.supervisor import FATAL_STORE_EXIT, Fatal, Supervisor
from agent.service.upstream_tasks import UpstreamTask, build_upstream_tasks
from agent.store import live_file
from agent.store.prune import run_retention
from agent.store.reserve import Reserve
from agent.store.store import Store

log = logging.getLogger(__name__)

EX_LOST = 75
"""Exit code of a stop that could not commit observations it had read (EX_TEMPFAIL): they are
counted in the log; the unit restarts the service, and the controllers' rings may hold them."""


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
        self.live.config_hash, self.live.config_loaded_at = fingerprint(cfg), self.live.started_at
        self.status = StatusWriter(self.live, self.now, status_interval_s)
        self.status.max_size, self.status.status_every_s = cfg.store.max_size, cfg.status_every
        self.status.write_budget = cfg.store.write_budget
        self.status.identity = (cfg.site, cfg.gateway) if cfg.upstreams else None
        self.ready = asyncio.Event()
        self.supervisor = Supervisor(Fatal(asyncio.Event()), tasks=self.live.tasks)
        self.resume: dict[str, Resume] = {}
        self.reserve = Reserve(self.path, cfg.store.reserve, cfg.store.max_size)
        self._recorder: Recorder | None = None
        self.running: Running | None = None
        self.reloads = Reloads()

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
        async with asyncio.TaskGroup() as tg:
            running = self.running = self._prepare(tg, store)
            self._start_tasks(running)
            self._announce_ready()
            await self.reloads.serve(self, stop)  # until stop; reloads asked for meanwhile are done
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

    def _prepare(self, tg: asyncio.TaskGroup, store: Store) -> Running:
        """The recorder, which wakes the forwarders after each commit, and the metrics endpoint
        when configured."""
        cfg = self.cfg
        forwarders: list[UpstreamTask] = []  # Running.forwarders: a reload changes it in place

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
        return Running(tg, store, self._recorder, self.supervisor, self.live, self.budget, forwarders)

    def _start_tasks(self, r: Running) -> None:
        cfg, sup = self.cfg, self.supervisor
        recorder = sup.run(
            "recorder", lambda: r.recorder.run(r.stop_recorder), r.stop_recorder, again_at_stop=True
        )
        r.recorder_tasks.append(r.tg.create_task(recorder, name="recorder"))
        for device in cfg.devices:
            r.start_device(device, self.resume.get(device.name))
        self.start_upstreams(r, build_upstream_tasks(r.store, cfg, self.live))
        status = self.status.loop(r.store, r.recorder, r.forwarders, r.stop_house)
        r.house_tasks.append(r.tg.create_task(status, name="status"))
        retention = cfg.store.retention
        if isinstance(retention, RetentionSettings) and cfg.upstreams:
            prune = run_retention(r.store, retention, self.clock, r.stop_house)
            r.house_tasks.append(r.tg.create_task(prune, name="retention"))

    def start_upstreams(self, r: Running, forwarders: Sequence[UpstreamTask]) -> None:
        """Start forwarders; each sink that takes one gets this process's MQTT Will first."""
        self.status.arm_wills(forwarders)  # before any sink connects
        for f in forwarders:
            r.start_upstream(f)

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

    async def _stop(self, r: Running) -> StopSequence:
        """Stop in order, each step bounded: pollers, recorder, forwarders' drain, housekeeping."""
        b = self.budget
        sdnotify.notify("STOPPING=1")
        log.info(
            "stopping: polling stops, the recorder commits, forwarders drain for %.0fs (hard stop %.0fs)",
            b.drain_s,
            b.hard_stop_s,
        )
        stopping = StopSequence(b)
        r.stop_polling()
        await stopping.wait_tasks(r.device_tasks(), b.pollers_s, "pollers")
        r.stop_recorder.set()
        await stopping.wait_tasks(r.recorder_tasks, b.recorder_s, "recorder")
        r.stop_forwarding()
        await stopping.wait_tasks(r.upstream_tasks(), b.forwarders_s, "forwarders")
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


async def serve(cfg: Config, *, db: str | None = None) -> int:
    """Entry point of `edge-agent run`: run until SIGTERM/SIGINT; SIGHUP reloads (`agent.service.reload`)."""
    stop = asyncio.Event()
    service = Service(cfg, db=db)
    install_signal_handlers(stop, lambda force: service.reloads.ask(force=force))
    return await service.run(stop)
