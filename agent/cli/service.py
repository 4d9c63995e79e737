"""`edge-agent run` (the service) and `edge-agent status` (what the running service reports).

`status` opens only the store's reader (it never creates, migrates or locks a store; exit 66
when there is none); `run` hands the store to `agent.service.run`. No SQL here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import click

from agent.cli import render
from agent.cli.context import EX_CONFIG, EX_IOERR, Context, run_async
from agent.config.loader import load
from agent.config.retention import RetentionSettings
from agent.core.contract import format_timestamp, parse_timestamp
from agent.core.errors import ConfigError, StoreError
from agent.core.wording import days_ahead
from agent.service import logs
from agent.store import budget
from agent.store.reader import Reader

STALE_AFTER_S = 30.0
# Below this much free space on the store's filesystem, SQLite cannot commit (new pages, WAL
# frames): the service cannot even write its live state then, so `status` says it from here.
FS_FULL_BYTES = 256 * 1024


@click.command("run")
@click.option("-c", "--config", "config_path", metavar="FILE", help="Gateway configuration (YAML).")
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="Log level; one line per state change at INFO, per poll at DEBUG.",
)
@click.pass_context
def run_cmd(ctx: click.Context, config_path: str | None, log_level: str) -> None:
    """Run the agent: poll the configured PLCs, record every transition, forward upstream.

    \b
    Under systemd (see systemd/edge-agent.service):
      edge-agent run -c /etc/edge-agent/config.yaml
    SIGTERM stops polling, commits what was read, drains upstream for a bounded
    time and exits 0. A configuration error exits 78 before anything starts
    (the unit does not restart on 78); a store that cannot be opened exits 74.
    """
    from agent.service.run import serve  # imports the protocol libraries: only when running

    logs.setup(log_level)
    path = config_path or ctx.obj.config
    try:
        cfg = load(path)
    except ConfigError as exc:
        click.echo(f"edge-agent: configuration error:\n{exc}", err=True)
        sys.exit(EX_CONFIG)
    try:
        code = asyncio.run(serve(cfg, db=ctx.obj.db_path))
    except StoreError as exc:
        click.echo(f"edge-agent: {exc}", err=True)
        sys.exit(EX_IOERR)
    sys.exit(code)


@click.command("status")
@click.option("-c", "--config", "config_path", metavar="FILE", help="Gateway configuration (YAML).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.pass_context
def status_cmd(ctx: click.Context, config_path: str | None, as_json: bool) -> None:
    """Show the running service's state, read from the store (no socket into the service).

    Per device connection: state, last poll, current boot id. Per upstream:
    backlog, oldest pending age, delivered, dead letters, last error. The store:
    size, free space, days of history that fit. The service writes this every
    few seconds; a state older than 30 s means the service is not running.
    """
    obj: Context = ctx.obj
    if config_path:
        obj.config = config_path

    async def go() -> dict[str, Any]:
        async with await obj.open_reader() as reader:
            return await collect_status(reader, obj.config)

    status = run_async(go)
    if as_json:
        click.echo(json.dumps(status, indent=2))
        return
    for line in status_lines(status):
        click.echo(line)


async def collect_status(reader: Reader, config_path: str) -> dict[str, Any]:
    """What `status --json` prints: the service's live state, upstreams, the store's budget."""
    now = datetime.now(UTC)
    live_row = await reader.live_state("service")
    service: dict[str, Any] | None = None
    running = False
    if live_row is not None:
        updated_at, state = live_row
        service = json.loads(state)
        age = (now - parse_timestamp(updated_at, "updated_at")).total_seconds()
        running = age < STALE_AFTER_S
        service["updated_at"], service["age_s"] = updated_at, round(age, 1)
    retention, quota = None, None
    with contextlib.suppress(ConfigError, OSError):  # status works with --db alone, too
        store_cfg = load(config_path, check_files=False).store
        retention, quota = store_cfg.retention, store_cfg.max_size
    high_water = retention.high_water if isinstance(retention, RetentionSettings) else 0.8
    keep = retention.payloads.days if isinstance(retention, RetentionSettings) else None
    b = budget.assess(await reader.measure(now, quota), high_water, keep)
    upstreams = [asdict(c) for c in await reader.outbox_counts()]
    return {
        "now": format_timestamp(now),
        "store": {
            "path": reader.path,
            **asdict(b),
            "problem": store_problem(service, running, b.fs_free_bytes),
        },
        "running": running,
        "service": service,
        "upstreams": upstreams,
    }


def store_problem(service: dict[str, Any] | None, running: bool, fs_free_bytes: int) -> str | None:
    """Why the store cannot be written now, if it cannot: the running service's recorder says
    so in its live state; a full filesystem is seen from here, since the service cannot write
    its live state then."""
    recorder = (service or {}).get("recorder") or {}
    if running and recorder.get("store_problem"):
        return str(recorder["store_problem"])
    if fs_free_bytes < FS_FULL_BYTES:
        return (
            f"the store's filesystem is full ({fs_free_bytes} bytes free): nothing can be committed "
            "until space is freed; the service holds what it reads and retries"
        )
    return None


def status_lines(status: dict[str, Any]) -> list[str]:
    """`status` for people: the service and its devices, the upstreams, the store."""
    out = _service_lines(status)
    out.append("")
    out.append("upstreams:")
    ups = status["upstreams"]
    if ups:
        keys = list(ups[0].keys())
        out += render.table(keys, [[u.get(k) for k in keys] for u in ups])
    else:
        out.append("  none configured")
    return out + _store_lines(status["store"])


def _service_lines(status: dict[str, Any]) -> list[str]:
    svc = status["service"]
    if svc is None:
        return ["service: has never run against this store"]
    word = "running" if status["running"] else f"NOT RUNNING (last state {svc['age_s']} s old)"
    out = [f"service: {word}, pid {svc['pid']}, started {svc['started_at']}, config {svc['config']}"]
    if svc.get("store_problem"):
        out.append(f"  ALARM: {svc['store_problem']}")
    rec = svc.get("recorder", {})
    if rec.get("store_problem"):
        out.append(f"  STORE CANNOT BE WRITTEN: {rec['store_problem']}")
    out.append("")
    out.append("devices:")
    fields = ("device", "receiver", "state", "last_poll_at", "boot_id", "polls", "read_errors", "last_error")
    rows = [[c[f] for f in fields] for c in svc["connections"]]
    headers = ["device", "connection", "state", "last poll", "bootId", "polls", "errors", "last error"]
    return out + render.table(headers, rows)


def _store_lines(st: dict[str, Any]) -> list[str]:
    size, free = st["store_bytes"] / 1e6, st["fs_free_bytes"] / 1e9
    out = ["", f"store: {st['path']}  {size:.1f} MB, filesystem free {free:.1f} GB"]
    if st.get("days_that_fit") is not None:
        out.append(f"  history that fits at the current rate: {days_ahead(st['days_that_fit'])}")
    if st.get("days_until_full") is not None:
        out.append(f"  room left at the current rate: {days_ahead(st['days_until_full'])}")
    if st.get("warning"):
        out.append(f"  WARNING: {st['warning']}")
    if st.get("problem"):
        out.append(f"  STORE PROBLEM: {st['problem']}")
    return out
