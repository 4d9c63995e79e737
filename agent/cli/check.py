"""`edge-agent check`: validate the configuration, and with `--probe` read every device once.

Exit codes: 0 fine; 78 (EX_CONFIG) when the configuration has problems (every one is printed,
with file, line and key); 69 (EX_UNAVAILABLE) when `--probe` could not read a device.
"""

from __future__ import annotations

import asyncio
import sys

import click

from agent.cli.context import EX_CONFIG, EX_UNAVAILABLE
from agent.config import loader as config
from agent.config.store import DEFAULT_CONFIG
from agent.core.errors import ConfigError, SourceUnavailable
from agent.core.snapshot import Snapshot
from agent.core.wording import counted


@click.command("check")
@click.option(
    "-c",
    "--config",
    "config_path",
    metavar="FILE",
    help="Configuration to check (default: the -c given to edge-agent).",
)
@click.option(
    "--probe", is_flag=True, help="Also connect to each device and read its map once, printing what it saw."
)
@click.option(
    "--timeout", default=5.0, show_default=True, metavar="SECONDS", help="Per connection, with --probe."
)
@click.pass_context
def check(ctx: click.Context, config_path: str | None, probe: bool, timeout: float) -> None:
    """Validate the configuration before anything starts (every problem at once, exit 78).

    \b
    edge-agent check -c /etc/edge-agent/config.yaml
    edge-agent check -c config.yaml --probe     # also read every device once
    """
    path = config_path or getattr(ctx.obj, "config", None) or DEFAULT_CONFIG
    try:
        cfg = config.load(path)
    except ConfigError as exc:
        click.echo(f"edge-agent: configuration error: {exc}", err=True)
        sys.exit(EX_CONFIG)
    connections = sum(len(d.connections) for d in cfg.devices)
    click.echo(
        f"{path}: OK: site {cfg.site}, gateway {cfg.gateway}, {counted(len(cfg.devices), 'device')} "
        f"({counted(connections, 'connection')}), {counted(len(cfg.upstreams), 'upstream')},"
        f" store {cfg.store.path}"
    )
    for warning in cfg.warnings:
        click.echo(f"warning: {warning}", err=True)
    if probe and not asyncio.run(_probe_all(cfg, timeout)):
        sys.exit(EX_UNAVAILABLE)


async def _probe_all(cfg: config.Config, timeout: float) -> bool:
    jobs = [(d, c) for d in cfg.devices for c in d.connections]
    results = await asyncio.gather(*(_probe(d, c, timeout) for d, c in jobs))
    for line in results:
        click.echo(line)
    return all(not line.startswith("FAIL") for line in results)


async def _probe(device: config.Device, conn: config.Connection, timeout: float) -> str:
    # The protocol libraries (asyncua alone takes ~0.4 s to import) are loaded only to probe,
    # so every other command starts fast.
    from agent.sources.modbus.poller import ModbusSource
    from agent.sources.opcua.poller import OpcUaSource
    from agent.sources.pollers import build_source

    source = build_source(device, conn)
    assert isinstance(source, ModbusSource | OpcUaSource)
    try:
        async with asyncio.timeout(timeout):
            await source.connect()
            snap = await source.probe()
    except (SourceUnavailable, TimeoutError) as exc:
        return f"FAIL {device.name} via {conn.receiver}: {exc or 'timed out'}"
    finally:
        await source.close()
    return f"ok   {device.name} via {conn.receiver}: {describe(snap)}"


def describe(snap: Snapshot) -> str:
    """What a probe saw, on one line: boot id, each channel, the ring."""
    boot = snap.boot_id if snap.boot_id is not None else f"none ({snap.boot_error or 'not mapped'})"
    parts = [f"boot id {boot}"]
    if snap.start_time:
        parts.append(f"server started {snap.start_time}")
    for ch in snap.channels:
        if ch.error:
            parts.append(f"{ch.channel}: ERROR {ch.error}")
        elif ch.window_ms is not None:
            parts.append(f"{ch.channel}: {ch.state} at {ch.source_timestamp or '-'} (window key)")
        else:
            parts.append(f"{ch.channel}: T{ch.transition_id} {ch.state} at {ch.source_timestamp or '-'}")
    if snap.ring is not None:
        parts.append(f"ring head {snap.ring.head}, {len(snap.ring.entries)}/{snap.ring.capacity} entries")
    elif snap.ring_error:
        parts.append(f"ring: ERROR {snap.ring_error}")
    return "; ".join(parts)
