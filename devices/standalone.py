"""Command line of the simulated plant (``python -m devices``, later ``edge-agent simulate``).

Output contract, for people and for tests that start the plant as a subprocess:

* line 1: ``READY {json}`` with the bound endpoints (ports are real even with port 0) and pid;
* then, for people: the endpoints, the register map and the agent config snippet (YAML);
* with ``--commands``: each stdin line is one scenario step in YAML flow style, e.g.
  ``{transition: PUMP-07/Trip, state: 1}`` or ``{restart: PUMP-07}``, answered by one line
  ``OK {json}`` (the controllers' boot ids, counters and ring heads) or ``ERR message``.

It runs until SIGTERM or SIGINT (or, with ``--commands``, until stdin closes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import yaml

from devices.controller import Controller
from devices.modbus_map import RegisterMap
from devices.opcua_nodes import NAMESPACE
from devices.opcua_server import OpcUaSecurity
from devices.pki import make_test_pki
from devices.plant import Plant
from devices.scenario import Step, controller_from_dict, load_scenario, parse_step


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m devices", description="Run simulated PLCs over Modbus TCP and OPC UA."
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--modbus-port", type=int, default=15020, help="first Modbus port (one per controller); 0 = free"
    )
    p.add_argument("--opcua-port", type=int, default=48400, help="OPC UA port; 0 = free")
    p.add_argument("--no-modbus", action="store_true")
    p.add_argument("--no-opcua", action="store_true")
    p.add_argument(
        "--controllers", nargs="+", default=["PUMP-07"], metavar="NAME", help="ignored with --scenario"
    )
    p.add_argument("--channels", nargs="+", default=["Trip"], metavar="NAME")
    p.add_argument("--counter-bits", type=int, choices=(16, 32), default=32)
    p.add_argument("--boot-id", choices=("counter", "random32", "none"), default="counter")
    p.add_argument("--boot-id-start", type=int, default=17)
    p.add_argument("--ring", type=int, default=8, help="ring buffer slots (Modbus: at most 10)")
    p.add_argument("--word-order", choices=("big", "little"), default="big")
    p.add_argument("--poll", default="250ms", help="poll interval written into the config snippet")
    p.add_argument("--seed", type=int, default=0)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--scenario", type=Path, help="YAML scenario: controllers and steps")
    mode.add_argument("--random", type=float, metavar="RATE", help="random transitions per second")
    p.add_argument("--commands", action="store_true", help="read scenario steps from stdin, one per line")
    p.add_argument("--pki", type=Path, help="directory for test certificates: offer Basic256Sha256 endpoints")
    p.add_argument(
        "--user", action="append", default=[], metavar="NAME:PASSWORD", help="disables anonymous login"
    )
    p.add_argument("--quiet", action="store_true", help="print only the READY line")
    return p


def _controllers(args: argparse.Namespace) -> tuple[list[Controller], list[Step]]:
    if args.scenario:
        scenario = load_scenario(args.scenario.read_text())
        return scenario.controllers, scenario.steps
    channels = [{"name": n, "counter_bits": args.counter_bits} for n in args.channels]
    spec = {
        "boot_id": args.boot_id,
        "boot_id_start": args.boot_id_start,
        "ring": args.ring,
        "channels": channels,
    }
    ctrls = [
        controller_from_dict({"name": n, **spec}, seed=args.seed + i) for i, n in enumerate(args.controllers)
    ]
    return ctrls, []


async def _security(args: argparse.Namespace) -> OpcUaSecurity | None:
    users = dict(u.split(":", 1) for u in args.user)
    if not args.pki:
        return OpcUaSecurity(users=users) if users else None
    pki = await make_test_pki(args.pki)
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


async def run(args: argparse.Namespace) -> int:
    controllers, steps = _controllers(args)
    plant = Plant(
        controllers,
        host=args.host,
        modbus_port=None if args.no_modbus else args.modbus_port,
        opcua_port=None if args.no_opcua else args.opcua_port,
        word_order=args.word_order,
        security=await _security(args),
        poll=args.poll,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with plant:
        print("READY " + json.dumps({"pid": os.getpid(), **plant.endpoints()}), flush=True)
        if not args.quiet:
            print(describe(plant), flush=True)
        tasks: list[asyncio.Task[Any]] = []
        async with asyncio.TaskGroup() as tg:
            if steps:
                tasks.append(tg.create_task(plant.run_steps(steps), name="scenario"))
            if args.random:
                tasks.append(
                    tg.create_task(
                        plant.run_random(args.random, seed=args.seed, stop=stop), name="random-load"
                    )
                )
            if args.commands:
                tasks.append(tg.create_task(_commands(plant, stop), name="commands"))
            await stop.wait()
            for task in tasks:
                task.cancel()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        return 130
