"""A simulated plant run as a process: what ``python -m devices`` / ``edge-agent simulate`` do.

Output contract, for people and for tests that start the plant as a subprocess:

* line 1: ``READY {json}`` with the bound endpoints (ports are real even with port 0) and pid;
* then, for people: the endpoints, the register map and the agent config snippet (YAML);
* with ``--commands``: each stdin line is one scenario step in YAML flow style, e.g.
  ``{transition: PUMP-07/Trip, state: 1}`` or ``{restart: PUMP-07}``, answered by one line
  ``OK {json}`` (the controllers' boot ids, counters and ring heads) or ``ERR message``.

It runs until SIGTERM or SIGINT (or, with ``--commands``, until stdin closes). The options are
parsed in ``devices.cli``; this module imports the protocol stacks, so only a run loads it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from devices.controller import Controller
from devices.modbus_map import RegisterMap
from devices.opcua_nodes import NAMESPACE
from devices.opcua_server import OpcUaSecurity
from devices.pki import make_test_pki
from devices.plant import Plant
from devices.scenario import Step, controller_from_dict, load_scenario, parse_step


@dataclass(frozen=True)
class SimulateOptions:
    """What the command line asked for: one field per option of ``devices.cli.simulate``."""

    host: str
    modbus_port: int
    opcua_port: int
    no_modbus: bool
    no_opcua: bool
    controllers: tuple[str, ...]
    channels: tuple[str, ...]
    counter_bits: int
    boot_id: str
    boot_id_start: int
    ring: int
    word_order: Literal["big", "little"]
    poll: str
    seed: int
    scenario: Path | None
    random: float | None
    commands: bool
    pki: Path | None
    user: tuple[str, ...]
    quiet: bool


def _controllers(options: SimulateOptions) -> tuple[list[Controller], list[Step]]:
    if options.scenario:
        scenario = load_scenario(options.scenario.read_text())
        return scenario.controllers, scenario.steps
    channels = [{"name": n, "counter_bits": options.counter_bits} for n in options.channels]
    spec = {
        "boot_id": options.boot_id,
        "boot_id_start": options.boot_id_start,
        "ring": options.ring,
        "channels": channels,
    }
    ctrls = [
        controller_from_dict({"name": n, **spec}, seed=options.seed + i)
        for i, n in enumerate(options.controllers)
    ]
    return ctrls, []


async def _security(options: SimulateOptions) -> OpcUaSecurity | None:
    users = dict(u.split(":", 1) for u in options.user)
    if not options.pki:
        return OpcUaSecurity(users=users) if users else None
    pki = await make_test_pki(options.pki)
    return OpcUaSecurity(
        policies=("None", "Basic256Sha256_Sign", "Basic256Sha256_SignAndEncrypt"),
        certificate=pki.server.certificate,
        private_key=pki.server.private_key,
        trusted_dir=pki.trusted_dir,
        users=users,
    )


def status(plant: Plant) -> dict[str, Any]:
    """What a test driving the plant over stdin needs to know after each step."""
    return {
        name: {
            "boot_id": c.boot_id,
            "head": c.head,
            "channels": {s.name: c.channel(i).transition_id for i, s in enumerate(c.channels)},
        }
        for name, c in plant.controllers.items()
    }


def describe(plant: Plant) -> str:
    lines = ["Endpoints:"]
    for name, mb in plant.modbus.items():
        lines.append(
            f"  {name}: modbus tcp://{mb.host}:{mb.port} unit {mb.unit} (word order {mb.map.word_order})"
        )
    if plant.opcua is not None:
        lines.append(
            f"  opcua: {plant.opcua.endpoint} namespace {NAMESPACE} "
            f"(policies {', '.join(plant.opcua.security.policies)})"
        )
    for ctrl in plant.controllers.values():
        m = RegisterMap(ctrl)
        lines.append(f"Register map of {ctrl.name} (holding = input registers):")
        lines.append(
            "  0..1 boot id uint32" if ctrl.has_boot_id else "  no boot id (registers 0..1 unmapped)"
        )
        for i, spec in enumerate(ctrl.channels):
            base = m.channel_register(i)
            lines.append(
                f"  {base} {spec.name}.transition_id uint{spec.counter_bits}, {base + 2} state uint16, "
                f"{base + 3}..{base + 6} source time uint64 ms"
            )
        lines.append(
            f"  {m.ring_register} ring head uint32, {m.ring_register + 2} capacity {ctrl.ring_capacity}, "
            f"slots at {m.slots_register} x 12 registers "
            f"(read {m.ring_read_count} registers from {m.ring_register})"
        )
    lines.append("Agent config snippet:")
    lines.append(plant.config_yaml())
    return "\n".join(lines)


async def _commands(plant: Plant, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        if not line.strip():
            continue
        try:
            await plant.run_steps([parse_step(yaml.safe_load(line))])
            print("OK " + json.dumps(status(plant)), flush=True)
        except Exception as exc:  # a bad command must not kill the plant under test
            print(f"ERR {type(exc).__name__}: {exc}", flush=True)
    stop.set()


async def run(options: SimulateOptions) -> int:
    controllers, steps = _controllers(options)
    plant = Plant(
        controllers,
        host=options.host,
        modbus_port=None if options.no_modbus else options.modbus_port,
        opcua_port=None if options.no_opcua else options.opcua_port,
        word_order=options.word_order,
        security=await _security(options),
        poll=options.poll,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with plant:
        print("READY " + json.dumps({"pid": os.getpid(), **plant.endpoints()}), flush=True)
        if not options.quiet:
            print(describe(plant), flush=True)
        tasks: list[asyncio.Task[Any]] = []
        async with asyncio.TaskGroup() as tg:
            if steps:
                tasks.append(tg.create_task(plant.run_steps(steps), name="scenario"))
            if options.random:
                tasks.append(
                    tg.create_task(
                        plant.run_random(options.random, seed=options.seed, stop=stop), name="random-load"
                    )
                )
            if options.commands:
                tasks.append(tg.create_task(_commands(plant, stop), name="commands"))
            await stop.wait()
            for task in tasks:
                task.cancel()
    return 0
