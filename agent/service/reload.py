"""Reloading the configuration without stopping (operator.md section 5): SIGHUP, `systemctl reload`.

`SIGHUP` asks for a reload, `SIGUSR2` for one that may change identity (`edge-agent reload --force`
sends it). One reload runs at a time, between READY and the stop; a stop asked for during a
reload waits for it (each of its steps is bounded by the stop budget).

1. The files are read and checked by the same loader as `edge-agent check`, and every file the
   new configuration names must be readable by this process. Invalid: nothing changes, the old
   configuration stays in force, every problem is logged once with its file:line.
2. `agent.config.changes.compare` says what moves. A change of identity is refused with its
   reason, unless forced: nothing changes.
3. Applied: removed and changed devices stop (a poll in flight is handed to the recorder); the
   recorder commits what they read; changed and added devices start from the positions in the
   store (so a restarted device records no gap for what it had already seen). Removed and changed
   upstreams stop and close; added ones are registered in the store and start with changed ones.
   Devices and upstreams that did not change are not touched: their connections stay open and
   their ticks go on. Settings that only a new process can take wait for the next start (said).

`sd_notify` RELOADING=1 (with MONOTONIC_USEC) before and READY=1 after; the outcome is in the live
state (`status`) and counted by result (`edge_agent_config_reloads_total`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol

from agent.config.access import unreadable_now
from agent.config.changes import Changes, compare
from agent.config.fingerprint import fingerprint
from agent.config.loader import Config, load
from agent.core.errors import ConfigError
from agent.core.live import ServiceLive
from agent.core.wording import counted
from agent.service import sdnotify
from agent.service.running import Running, resume_points
from agent.service.status import StatusWriter
from agent.service.upstream_tasks import UpstreamTask, build_upstream_tasks

log = logging.getLogger(__name__)


class Service(Protocol):
    """What a reload needs of the running service (`agent.service.run.Service`)."""

    cfg: Config
    path: str
    live: ServiceLive
    status: StatusWriter
    running: Running | None

    def now(self) -> str: ...
    def start_upstreams(self, r: Running, forwarders: Sequence[UpstreamTask]) -> None: ...


class Reloads:
    """Reload requests (from the signal handlers) and their handling, one at a time."""

    def __init__(self) -> None:
        self._asked = asyncio.Event()
        self._force = False

    def ask(self, *, force: bool = False) -> None:
        """A reload is asked for (a signal handler's call: no await)."""
        self._force = self._force or force
        self._asked.set()

    async def serve(self, service: Service, stop: asyncio.Event) -> None:
        """Until `stop`: each reload asked for is done (requests that come during one make one more)."""
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                asked = asyncio.ensure_future(self._asked.wait())
                await asyncio.wait({stopping, asked}, return_when=asyncio.FIRST_COMPLETED)
                asked.cancel()
                if stop.is_set():
                    return
                self._asked.clear()
                force, self._force = self._force, False
                try:
                    await reload(service, force=force)
                except Exception as exc:  # a fault in a reload never stops the service
                    log.exception("reload failed unexpectedly; what runs goes on as it is: %s", exc)
                    _done(service, "failed", {"problems": [f"{type(exc).__name__}: {exc}"]})
        finally:
            stopping.cancel()


async def reload(service: Service, *, force: bool = False) -> str:
    """One reload of the service's configuration file; returns its result (applied, invalid, refused)."""
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    sdnotify.notify(f"RELOADING=1\nMONOTONIC_USEC={usec}\nSTATUS=reloading {service.cfg.file}")
    old = service.cfg
    log.info("reload asked for%s: reading %s", " (identity changes allowed)" if force else "", old.file)
    try:
        new = await asyncio.to_thread(_load_checked, old.file, service.path)
    except ConfigError as exc:
        problems = str(exc).splitlines()
        for line in problems:
            log.error("reload refused, the configuration in force is kept: %s", line)
        return _done(service, "invalid", {"problems": problems})
    changes = compare(old, new, force=force)
    if changes.refused:
        for reason in changes.refused:
            log.error("reload refused (identity; `edge-agent reload --force` or a restart): %s", reason)
        return _done(service, "refused", {"reasons": list(changes.refused)})
    for warning in new.warnings:
        log.warning("configuration warning: %s", warning)
    await _apply(service, new, changes)
    service.cfg = _in_force(old, new)
    service.live.config_hash = fingerprint(new)
    service.live.config_loaded_at = service.now()
    for key in changes.pending_restart:
        log.warning("reload: %s changed; it takes effect at the next restart", key)
    log.info("reload applied: %s", changes.summary())
    return _done(service, "applied", {"changes": changes.as_dict(), "summary": changes.summary()})


def _load_checked(path: str, store_path: str) -> Config:
    """The loader of `edge-agent check` and `run`, and every file named readable by this process."""
    cfg = load(path)
    unreadable = unreadable_now(cfg, store_path)
    if unreadable:
        raise ConfigError("\n".join(unreadable))
    return cfg


def _done(service: Service, result: str, detail: dict[str, Any]) -> str:
    service.live.reloaded(service.now(), result, detail)
    devices = counted(len(service.cfg.devices), "device")
    sdnotify.notify(f"READY=1\nSTATUS=polling {devices} (reload {result})")
    return result


def _in_force(old: Config, new: Config) -> Config:
    """`new`, but with what waits for a restart as it was: the store's file, durability, size and
    retention, and the metrics endpoint."""
    store = dataclasses.replace(
        old.store, commit_interval=new.store.commit_interval, write_budget=new.store.write_budget
    )
    return dataclasses.replace(new, store=store, metrics=old.metrics)


async def _apply(service: Service, new: Config, changes: Changes) -> None:
    running = service.running
    assert running is not None, "a reload runs only while the service runs"
    going = changes.devices_removed + changes.devices_changed
    await asyncio.gather(*(running.stop_device(name) for name in going))
    coming = changes.devices_changed + changes.devices_added
    if coming:
        await running.recorder.caught_up()  # what the stopped devices read is in the store
        points = await resume_points(service.path, coming)
        for device in new.devices:
            if device.name in coming:
                running.start_device(device, points.get(device.name))
    leaving = changes.upstreams_removed + changes.upstreams_changed
    await asyncio.gather(*(running.stop_upstream(name) for name in leaving))
    arriving = changes.upstreams_changed + changes.upstreams_added
    if arriving:
        ups = tuple(u for u in new.upstreams if u.name in arriving)
        await running.store.register_upstreams([(u.name, u.backfill) for u in ups], service.now())
        tasks = build_upstream_tasks(running.store, dataclasses.replace(new, upstreams=ups), service.live)
        service.start_upstreams(running, tasks)
    service.status.status_every_s = new.status_every
    service.status.write_budget = new.store.write_budget
    service.status.identity = (new.site, new.gateway) if new.upstreams else None
    running.recorder.min_interval_s = new.store.commit_interval
