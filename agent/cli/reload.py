"""`edge-agent reload`: the running service re-reads its configuration, and says how it went.

The service does the reload (`agent.service.reload`, on SIGHUP); this command checks the file
first, signals the process the store names, and waits for the outcome in the live state.
`config_lines` is the configuration's part of `edge-agent status`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

import click

from agent.cli import render
from agent.cli.context import EX_CONFIG, EX_FAILURE, EX_NOPERM, EX_UNAVAILABLE, Context, run_async
from agent.config.loader import load
from agent.core.errors import ConfigError
from agent.service import process

POLL_S = 0.5
EXIT_BY_RESULT = {"applied": 0, "invalid": EX_CONFIG, "refused": EX_FAILURE, "failed": EX_FAILURE}


@click.command("reload")
@click.option("-c", "--config", "config_path", metavar="FILE", help="Gateway configuration (YAML).")
@click.option(
    "--force",
    is_flag=True,
    help="Apply identity changes too (site, gateway, a device or channel renamed): they change what "
    "new events are called. Without it such a reload is refused and nothing changes.",
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="How long to wait for the service's outcome.",
)
@click.pass_context
def reload_cmd(ctx: click.Context, config_path: str | None, force: bool, wait_s: float) -> None:
    """Make the running service re-read its configuration, without stopping it.

    \b
    1. The file is checked here first, as `edge-agent check` does: a problem is
       printed with file:line and nothing is sent (exit 78).
    2. SIGHUP goes to the service the store names (--force: SIGUSR2).
    3. The service's outcome is printed: `applied` (exit 0) with what started,
       stopped and restarted; `invalid` (exit 78) or `refused` (exit 1), the
       configuration in force kept, with every reason.
    Devices and upstreams that did not change keep running untouched: their
    connections stay open and no tick is missed. `systemctl reload edge-agent`
    sends the same SIGHUP but does not wait; `edge-agent status` shows the outcome.
    """
    obj: Context = ctx.obj
    if config_path:
        obj.config = config_path
    try:
        load(obj.config)
    except ConfigError as exc:
        click.echo(f"edge-agent: configuration error, nothing sent to the service:\n{exc}", err=True)
        sys.exit(EX_CONFIG)
    service = run_async(lambda: _live(obj))
    pid = service.get("pid") if service else None
    if not isinstance(pid, int) or process.alive(pid, service.get("process")) is not True:
        click.echo("edge-agent: the service is not running against this store: nothing to reload", err=True)
        sys.exit(EX_UNAVAILABLE)
    before = sum((service.get("reloads") or {}).values())
    try:
        os.kill(pid, signal.SIGUSR2 if force else signal.SIGHUP)
    except PermissionError:
        click.echo(f"edge-agent: not allowed to signal the service (pid {pid}); run as root", err=True)
        sys.exit(EX_NOPERM)
    outcome = _wait_for_outcome(obj, before, wait_s)
    if outcome is None:
        click.echo(f"edge-agent: sent; no outcome within {wait_s:g} s (see `edge-agent status`)", err=True)
        sys.exit(EX_FAILURE)
    for line in reload_lines(outcome):
        click.echo(line)
    sys.exit(EXIT_BY_RESULT.get(str(outcome.get("result")), EX_FAILURE))


async def _live(obj: Context) -> dict[str, Any]:
    async with await obj.open_reader() as reader:
        row = await reader.live_state("service")
    return {} if row is None else dict(json.loads(row[1]))


def _wait_for_outcome(obj: Context, before: int, wait_s: float) -> dict[str, Any] | None:
    """The service's last reload once its count of reloads grew past `before` (the live state is
    written every 2 s), or None after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(POLL_S)
        service = asyncio.run(_live(obj))
        if sum((service.get("reloads") or {}).values()) > before:
            return dict(service.get("last_reload") or {})
    return None


def reload_lines(outcome: dict[str, Any]) -> list[str]:
    """A reload's outcome for people: the result and what it did, or why nothing changed."""
    result, at = str(outcome.get("result")), outcome.get("at")
    if result == "applied":
        return [f"reload applied at {at}: {outcome.get('summary', '')}"]
    reasons = outcome.get("problems") or outcome.get("reasons") or []
    out = [f"reload {result.upper()} at {at}: the configuration in force was kept"]
    for reason in reasons:
        out += render.wrapped("problem" if result == "invalid" else "reason", str(reason), indent=4)
    return out


def config_lines(svc: dict[str, Any]) -> list[str]:
    """`status`: the configuration in force and the last reload's outcome."""
    if not svc.get("config_hash"):
        return []
    out = [f"configuration: {svc['config_hash']}, loaded {svc.get('config_loaded_at')}"]
    if svc.get("last_reload"):
        out += ["last " + line for line in reload_lines(svc["last_reload"])]
    return out
