"""`edge-agent check`: validate the configuration, check that the service's user can read every
file it names, and with `--probe` read every device and reach every upstream once.

Exit codes: 0 fine; 78 (EX_CONFIG) when the configuration has problems (every one is printed,
with file, line and key); 77 (EX_NOPERM) when the service's user could not read a file it needs
(or write the store's directory); 69 (EX_UNAVAILABLE) when `--probe` could not read a device
(or one of its nodes or registers) or reach an upstream.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys

import click

from agent.cli.context import EX_CONFIG, EX_NOPERM, EX_UNAVAILABLE
from agent.config import loader as config
from agent.config.access import Who, check_access, named_user, unit_user
from agent.config.path_env import CREDENTIALS, PathEnv
from agent.config.sparkplug import AnyUpstream, SparkplugUpstream
from agent.config.store import DEFAULT_CONFIG
from agent.config.unit import Unit, find_unit, read_unit
from agent.config.upstreams import MqttUpstream
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
    "--probe",
    is_flag=True,
    help="Also read every device once (all nodes and registers) and reach every upstream "
    "(MQTT CONNECT; HTTP POST of an empty batch), printing what each answered.",
)
@click.option(
    "--timeout", default=5.0, show_default=True, metavar="SECONDS", help="Per connection, with --probe."
)
@click.option(
    "--unit",
    "unit_path",
    metavar="FILE",
    envvar="EDGE_AGENT_UNIT",
    help="The service's unit file: its LoadCredential= lines resolve ${CREDENTIALS_DIRECTORY}, its "
    "DynamicUser=/User= is who must read the files (default: the installed edge-agent.service; "
    "'none': no unit).",
)
@click.option(
    "--as-user",
    metavar="USER",
    help="Check readability as this user instead of the unit's (a name or a uid).",
)
@click.pass_context
def check(
    ctx: click.Context,
    config_path: str | None,
    probe: bool,
    timeout: float,
    unit_path: str | None,
    as_user: str | None,
) -> None:
    """Validate the configuration before anything starts (every problem at once, exit 78).

    Also checks, as the service's user, that every file the configuration names can be read
    and the store's directory written (exit 77 names the file and the user), and warns about
    secrets every user can read and a metrics endpoint beyond loopback.

    \b
    edge-agent check -c /etc/edge-agent/config.yaml
    edge-agent check -c config.yaml --probe     # also read every device, reach every upstream
    edge-agent check -c config.yaml --unit ./edge-agent.service --as-user nobody
    """
    path = config_path or getattr(ctx.obj, "config", None) or DEFAULT_CONFIG
    unit = _unit(unit_path)
    paths = PathEnv(dict(os.environ), dict(unit.credentials) if unit else {}, unit.name if unit else None)
    try:
        cfg = config.load(path, paths=paths)
    except ConfigError as exc:
        click.echo(f"edge-agent: configuration error: {exc}", err=True)
        sys.exit(EX_CONFIG)
    store_path = getattr(ctx.obj, "db_path", None) or cfg.store.path
    connections = sum(len(d.connections) for d in cfg.devices)
    click.echo(
        f"{path}: OK: site {cfg.site}, gateway {cfg.gateway}, {counted(len(cfg.devices), 'device')} "
        f"({counted(connections, 'connection')}), {counted(len(cfg.upstreams), 'upstream')},"
        f" store {store_path}"
    )
    who = _who(as_user, unit)
    findings = check_access(cfg, store_path, who, unit)
    for warning in cfg.warnings:
        click.echo(f"warning: {warning}", err=True)
    for up in cfg.upstreams:
        if isinstance(up, MqttUpstream) and not up.receipts:
            click.echo(
                f"note: upstream {up.name!r} (MQTT) has no `receipts: true`: a PUBACK counts as delivered,"
                " though it only says the broker has the event (a broker restart can still lose it before"
                " its reader has it). With `edge-agent ledger` as the reader, turn receipts on"
                " (docs/upstream.md#receipts)."
            )
    for f in findings:
        click.echo(f"{f.level}: {f.text}", err=True)
    if who is None:
        click.echo(
            "note: readability for the service's user not checked: no installed edge-agent.service "
            "(give --unit FILE or --as-user USER)"
        )
    elif not any(f.level == "error" for f in findings):
        click.echo(f"files: {counted(len(cfg.files), 'file')} readable by {who.label}; store writable")
    if any(f.level == "error" for f in findings):
        sys.exit(EX_NOPERM)
    if probe and not asyncio.run(_probe_all(cfg, timeout)):
        sys.exit(EX_UNAVAILABLE)


def _unit(given: str | None) -> Unit | None:
    """The unit named by --unit, else the installed one (not when running inside the unit)."""
    found = given or (None if CREDENTIALS in os.environ else find_unit())
    if found is None or found == "none":
        return None
    try:
        return read_unit(found)
    except OSError as exc:
        click.echo(f"edge-agent: cannot read the unit {found}: {exc.strerror or exc}", err=True)
        sys.exit(EX_CONFIG)


def _who(as_user: str | None, unit: Unit | None) -> Who | None:
    try:
        if as_user is not None:
            return named_user(as_user)
        return unit_user(unit) if unit is not None else None
    except KeyError as exc:
        name = as_user or (unit.user if unit else "")
        raise click.BadParameter(f"no user {name!r} on this machine", param_hint="--as-user") from exc


async def _probe_all(cfg: config.Config, timeout: float) -> bool:
    jobs = [(d, c) for d in cfg.devices for c in d.connections]
    # The protocol libraries are imported before any probe starts: an import inside one probe
    # blocks the loop while the others' connect timeouts run (on a busy machine a reachable
    # device's 1 s Modbus connect ran out while the upstream probes imported aiohttp and aiomqtt).
    for module, needed in (("agent.sources.pollers", jobs), ("agent.sinks.probe", cfg.upstreams)):
        if needed:
            importlib.import_module(module)
    results = await asyncio.gather(
        *(_probe(d, c, timeout) for d, c in jobs), *(_probe_up(u, cfg, timeout) for u in cfg.upstreams)
    )
    for line in results:
        click.echo(line)
    return all(not line.startswith("FAIL") for line in results)


async def _probe_up(up: AnyUpstream, cfg: config.Config, timeout: float) -> str:
    from agent.sinks.probe import probe_upstream as probe  # the MQTT and HTTP clients: only to probe
    from agent.sparkplug.probe import probe_sparkplug

    try:
        async with asyncio.timeout(timeout + 2.0):
            if isinstance(up, SparkplugUpstream):
                ok, text = await probe_sparkplug(up, gateway=cfg.gateway)
            else:
                ok, text = await probe(up, site=cfg.site, gateway=cfg.gateway)
    except TimeoutError:
        ok, text = False, f"upstream {up.name}: no answer within {timeout:g} s"
    return f"{'ok  ' if ok else 'FAIL'} {text}"


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
        source.release()
    unread = unread_parts(snap)
    if unread:
        return f"FAIL {device.name} via {conn.receiver}: not read: {'; '.join(unread)}"
    return f"ok   {device.name} via {conn.receiver}: {describe(snap)}"


def unread_parts(snap: Snapshot) -> list[str]:
    """What a probe could not read (OPC UA nodes by their ids, e.g. BadNodeIdUnknown)."""
    out = [f"boot id: {snap.boot_error}"] if snap.boot_error else []
    out += [f"{ch.channel}: {ch.error}" for ch in snap.channels if ch.error]
    if snap.ring_error:
        out.append(f"ring: {snap.ring_error}")
    return out


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
