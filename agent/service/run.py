"""The service: pollers, recorder, forwarders and housekeeping under one task group.

Lifecycle (`edge-agent run`):
  start     open the store (a damaged store is moved aside, see `open_store`), register
            upstreams, start recorder, pollers, forwarders, status writer and retention;
            READY=1 once all are started.
  running   one failing device or upstream never stops the rest: sources reconnect with
            backoff, forwarders back off, the recorder holds a batch while the store cannot
            be written. WATCHDOG=1 only while the status loop runs and the recorder is not
            stuck inside one commit.
  SIGTERM   STOPPING=1; stop polling; let the recorder commit what was read; give each
            forwarder a bounded drain; close sinks; close the store; exit 0.

The order matters: a poll in flight finishes and is committed before the store closes, so
what the controllers showed is never half recorded. Nothing here is cancelled in the middle
of a store transaction except at the last resort (`hard_stop_s` after SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.config.loader import Config
from agent.core.contract import format_timestamp
from agent.core.decide import Outcome
from agent.core.errors import StoreCorrupt, StoreError
from agent.core.live import ServiceLive
from agent.service import sdnotify
from agent.service.forwarder import Forwarder, build_sink
from agent.service.recorder import Recorder
from agent.sources.pollers import run_pollers
from agent.store.prune import run_retention
from agent.store.retention import RetentionSettings
from agent.store.store import Store

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


async def open_store(path: str, cfg: Config, clock: Clock = utc_now) -> tuple[Store, str | None]:
    """Open the store; a damaged one is moved aside (database, WAL and SHM together) and a new
    store is started, so a corrupt file never becomes a crash loop. Returns (store, alarm)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        return await Store.open(path, synchronous=cfg.store.synchronous, max_bytes=cfg.store.max_size), None
    except StoreCorrupt as exc:
        stamp = clock().strftime("%Y%m%dT%H%M%SZ")
        moved = []
        for suffix in ("", "-wal", "-shm"):
            src = Path(path + suffix)
            if src.exists():
                dst = Path(f"{path}.corrupt-{stamp}{suffix}")
                src.rename(dst)
                moved.append(str(dst))
        alarm = f"store was damaged ({exc}); moved aside to {', '.join(moved)}; a new store was started"
        log.error("ALARM %s", alarm)
        store = await Store.open(path, synchronous=cfg.store.synchronous, max_bytes=cfg.store.max_size)
        return store, alarm


class Service:
    """Runs one gateway configuration until `stop` is set."""

    def __init__(
        self,
        cfg: Config,
        *,
        db: str | None = None,
        clock: Clock = utc_now,
        drain_s: float = 10.0,
        status_interval_s: float = 2.0,
        hard_stop_s: float = 25.0,
    ) -> None:
        self.cfg = cfg
        self.path = db or cfg.store.path
        self.clock = clock
        self.drain_s = drain_s
        self.status_interval_s = status_interval_s
        self.hard_stop_s = hard_stop_s
        self.live = ServiceLive(format_timestamp(clock()), os.getpid(), cfg.file)
        self.ready = asyncio.Event()
        self.decisions: dict[str, int] = {}
        self.collector: Any = None  # agent.service.metrics.SnapshotCollector when metrics are on
        self._outbox_counts: list[dict[str, Any]] = []
        self._counts_at = 0.0

    def now(self) -> str:
        return format_timestamp(self.clock())

    async def run(self, stop: asyncio.Event) -> int:
        store, alarm = await open_store(self.path, self.cfg, self.clock)
        self.live.store_problem = alarm
        try:
            await store.register_upstreams([(u.name, u.backfill) for u in self.cfg.upstreams], self.now())
            await self._run(store, stop)
        finally:
            await store.close()
        log.info("stopped cleanly")
        return 0

    async def _run(self, store: Store, stop: asyncio.Event) -> None:
        cfg = self.cfg
        forwarders = [
            Forwarder(
                store,
                build_sink(u, site=cfg.site, gateway=cfg.gateway),
                u,
                site=cfg.site,
                gateway=cfg.gateway,
            )
            for u in cfg.upstreams
        ]

        def committed(_batch: Any, outcomes: Sequence[Outcome]) -> None:
            for oc in outcomes:
                self.decisions[oc.decision.value] = self.decisions.get(oc.decision.value, 0) + 1
            for f in forwarders:
                f.wake()

        recorder = Recorder(store, on_commit=committed)
        if cfg.metrics is not None and cfg.metrics.listen:
            from agent.service import metrics  # prometheus-client is imported only when metrics are on

            self.collector = metrics.SnapshotCollector()
            metrics.serve(cfg.metrics.listen, self.collector)
        stop_polling, stop_recorder, stop_forwarding, stop_house = (asyncio.Event() for _ in range(4))
        async with asyncio.TaskGroup() as tg:
            rec_task = tg.create_task(recorder.run(stop_recorder), name="recorder")
            poll_task = tg.create_task(
                run_pollers(cfg.devices, recorder, stop_polling, self.live), name="pollers"
            )
            fwd_tasks = [
                tg.create_task(
                    f.run(stop_forwarding, drain_s=self.drain_s), name=f"forwarder[{f.upstream.name}]"
                )
                for f in forwarders
            ]
            tg.create_task(self._status_loop(store, recorder, forwarders, stop_house), name="status")
            retention = cfg.store.retention
            if isinstance(retention, RetentionSettings) and cfg.upstreams:
                tg.create_task(run_retention(store, retention, self.clock, stop_house), name="retention")
            self.ready.set()
            sdnotify.notify(f"READY=1\nSTATUS=polling {len(cfg.devices)} devices")
            log.info(
                "started devices=%d upstreams=%d store=%s pid=%d",
                len(cfg.devices),
                len(cfg.upstreams),
                self.path,
                os.getpid(),
            )
            await stop.wait()
            sdnotify.notify("STOPPING=1")
            log.info(
                "stopping: polling stops, the recorder commits, forwarders drain for %.0fs", self.drain_s
            )
            stop_polling.set()
            await _bounded(poll_task, 10.0, "pollers")
            stop_recorder.set()
            await _bounded(rec_task, 10.0, "recorder")
            stop_forwarding.set()
            for t in fwd_tasks:
                await _bounded(t, self.drain_s + 5.0, t.get_name())
            await self._write_status(store, recorder, forwarders)
            stop_house.set()
        for f in forwarders:
            with contextlib.suppress(Exception):
                await f.sink.close()

    async def _status_loop(
        self, store: Store, recorder: Recorder, forwarders: list[Forwarder], stop: asyncio.Event
    ) -> None:
        """Write live state into the store every few seconds and feed the systemd watchdog."""
        interval = sdnotify.watchdog_interval()
        while not stop.is_set():
            await self._write_status(store, recorder, forwarders)
            if interval is not None and recorder.healthy(max_commit_s=max(2 * interval, 10.0)):
                sdnotify.notify("WATCHDOG=1")
            wait = min(self.status_interval_s, interval or self.status_interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)

    async def _write_status(self, store: Store, recorder: Recorder, forwarders: list[Forwarder]) -> None:
        self.live.upstreams = {f.upstream.name: asdict(f.state) for f in forwarders}
        self.live.recorder = {
            **asdict(recorder.stats),
            "backlog": recorder.backlog,
            "store_problem": recorder.store_problem,
        }
        snapshot = self.live.snapshot()
        try:
            await store.write_live_state("service", self.now(), json.dumps(snapshot))
        except StoreError as exc:  # a full disk must not stop the service; the recorder says it loudly
            log.debug("live state not written: %s", exc)
        if self.collector is not None:
            if time.monotonic() - self._counts_at > 15.0:  # counting the outbox is not free on a big store
                self._outbox_counts = [asdict(c) for c in await store.outbox.counts()]
                self._counts_at = time.monotonic()
            size = sum(p.stat().st_size for p in (Path(store.path), Path(store.path + "-wal")) if p.exists())
            self.collector.snapshot = {
                **snapshot,
                "decisions": dict(self.decisions),
                "outbox": self._outbox_counts,
                "store_bytes": size,
            }


async def _bounded(task: asyncio.Task[Any], seconds: float, what: str) -> None:
    """Wait for a task to finish by itself; cancel it only after `seconds` (last resort)."""
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        log.error("%s did not stop within %.0fs; cancelling it", what, seconds)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _loop_exception(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """paho-mqtt (under aiomqtt) races its own socket on a broker restart: asyncio then logs
    "Exception in callback ... add_writer ... Bad file descriptor" with a traceback. It is known
    and harmless (the sink reconnects; nothing unacknowledged is marked delivered), so it gets
    one line; everything else keeps asyncio's default report."""
    exc = context.get("exception")
    if (
        isinstance(exc, OSError)
        and exc.errno == errno.EBADF
        and "add_writer" in str(context.get("handle", ""))
    ):
        log.warning("socket closed under a pending write (MQTT client after a broker restart): %s", exc)
        return
    unread = "never retrieved" in str(context.get("message", ""))
    if unread and exc is not None and type(exc).__module__.startswith("aiomqtt"):
        # aiomqtt leaves a disconnect future unread when the broker goes away; the sink saw it.
        log.warning("MQTT client: %s", exc)
        return
    loop.default_exception_handler(context)


def install_signal_handlers(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_loop_exception)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


async def serve(cfg: Config, *, db: str | None = None) -> int:
    """Entry point of `edge-agent run`: run until SIGTERM/SIGINT."""
    stop = asyncio.Event()
    install_signal_handlers(stop)
    return await Service(cfg, db=db).run(stop)
