"""The scenario of `edge-agent demo`: the whole mission on one machine, no outside services.

Simulated controllers from `devices/` (Modbus TCP and OPC UA; PUMP-07 over both paths, one
PLC without a boot id), the real service with a temporary store, and the embedded recording
HTTP upstream. During the run a controller restarts, the upstream goes away and comes back,
and a link cut makes the agent replay a controller's ring buffer. Imported only by the demo
command (the simulators are an independent peer); it prints nothing itself.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from agent.config.loader import load
from agent.core.live import ServiceLive
from agent.service.run import Service
from agent.store.reader import Reader
from devices.controller import ChannelSpec, Controller
from devices.plant import Plant
from devices.upstream import Receiver

Say = Callable[[str], None]


def _controllers() -> list[Controller]:
    return [
        Controller(
            "PUMP-07", [ChannelSpec("Trip"), ChannelSpec("OverTemp", {0: "Normal", 1: "OverTemp"})], seed=7
        ),
        Controller("VALVE-01", [ChannelSpec("Open", {0: "Closed", 1: "Open"})], seed=1, boot_id_start=3),
        Controller(
            "LEGACY-09", [ChannelSpec("Alarm", {0: "Normal", 1: "Alarm"})], boot_id_mode="none", seed=9
        ),
    ]


def _config(plant: Plant, upstream_url: str, db: Path) -> dict[str, Any]:
    devices = plant.device_configs()
    for dev in devices:
        dev["poll"] = "200ms"
        if dev["name"] != "PUMP-07":  # PUMP-07 is read over both paths; the others over Modbus only
            dev["connections"] = [c for c in dev["connections"] if "modbus" in c]
    return {
        "site": "demo-plant",
        "gateway": "gw-demo",
        "store": {"path": str(db)},
        "upstreams": [{"name": "historian", "http": {"url": upstream_url, "batch_size": 50}}],
        "devices": devices,
    }


async def _until(check: Callable[[], bool], timeout: float) -> None:
    """Wait until the running agent shows what the next step needs (bounded: a demo never hangs)."""
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)


def _valve_link(live: ServiceLive, up: bool) -> Callable[[], bool]:
    def check() -> bool:
        links = [c for c in live.connections if c.device == "VALVE-01"]
        return bool(links) and all((c.state == "up") == up for c in links)

    return check


async def _script(plant: Plant, rx: Receiver, say: Say, live: ServiceLive) -> None:
    async def flips(device: str, channel: str, n: int, pause: float = 0.4) -> None:
        for _ in range(n):
            await plant.transition(device, channel)
            await asyncio.sleep(pause)

    say("controllers change state (PUMP-07 over Modbus and OPC UA, VALVE-01, LEGACY-09 without a boot id)")
    await asyncio.gather(
        flips("PUMP-07", "Trip", 4), flips("VALVE-01", "Open", 3), flips("LEGACY-09", "Alarm", 2)
    )
    say("PUMP-07 restarts: new boot id, its counters start again from 1")
    await plant.restart("PUMP-07")
    await flips("PUMP-07", "Trip", 2)
    say("the upstream goes away for 5 s; events keep being recorded and wait in the outbox")
    await rx.go_away(5.0)
    await asyncio.gather(flips("PUMP-07", "OverTemp", 3), flips("VALVE-01", "Open", 2))
    await asyncio.sleep(3.5)
    say("the link to VALVE-01 is cut; meanwhile it changes 3 times (kept in its ring buffer)")
    await plant.modbus["VALVE-01"].cut_link()
    await asyncio.sleep(0.5)  # let a read that was in flight at the cut finish first
    await _until(_valve_link(live, up=False), 10.0)  # the agent has seen the link go
    await flips("VALVE-01", "Open", 3, pause=0.3)
    await asyncio.sleep(1.0)
    say("the link comes back: the agent reads the ring and records every entry with the boot id it carries")
    await plant.modbus["VALVE-01"].restore_link()
    await _until(_valve_link(live, up=True), 20.0)  # reconnected (after its backoff): the ring is read
    await asyncio.sleep(1.5)


async def run_demo(say: Say, keep_dir: str | None = None) -> dict[str, Any]:
    """Run the demo; returns the store path, the report summary and the upstream's counts."""
    started = time.monotonic()
    workdir = Path(keep_dir or tempfile.mkdtemp(prefix="edge-agent-demo-"))
    db = workdir / "events.db"
    for noisy in ("asyncua", "pymodbus", "aiohttp", "agent", "devices"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    say("starting simulated PLCs (OPC UA takes ~2 s) and the embedded upstream")
    async with Plant(_controllers(), poll="200ms") as plant, Receiver() as rx:
        cfg_path = workdir / "config.yaml"
        cfg_path.write_text(yaml.safe_dump(_config(plant, rx.url + "/ingest", db), sort_keys=False))
        cfg = load(cfg_path)
        service = Service(cfg)
        stop = asyncio.Event()
        task = asyncio.create_task(service.run(stop), name="service")
        await service.ready.wait()
        say(f"agent running: store {db}, config {cfg_path}")
        await _script(plant, rx, say, service.live)
        say("waiting for the outbox to drain")
        await _drained(db, timeout=20.0)
        stop.set()
        await task
        upstream = rx.stats()
    return {
        "store": str(db),
        "config": str(cfg_path),
        "upstream": upstream,
        "seconds": round(time.monotonic() - started, 1),
    }


async def _drained(db: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    async with await Reader.open(db) as reader:
        while time.monotonic() < deadline:
            counts = await reader.outbox_counts()
            if all(c.pending == 0 for c in counts):
                return
            await asyncio.sleep(0.3)
