"""`edge-agent run` (the service) and `edge-agent status` (what the running service reports).

`status` opens only the store's reader (it never creates, migrates or locks a store; exit 66
when there is none); `run` hands the store to `agent.service.run`. No SQL here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import Any

import click

from agent.cli import render
from agent.cli.context import EX_CONFIG, EX_IOERR, EX_NOPERM, Context, run_async
from agent.cli.liveness import NOT_RESPONDING, RUNNING, STOPPED, liveness
from agent.cli.reload import config_lines
from agent.config.access import unreadable_now
from agent.config.loader import Config, load
from agent.config.retention import RetentionSettings
from agent.core import wear
from agent.core.errors import ConfigError, StoreError
from agent.core.timestamps import format_timestamp, parse_timestamp
from agent.core.wording import days_ahead
from agent.service import logs, process
from agent.service.config_apart import load_apart
from agent.store import budget
from agent.store.reader import Reader
from agent.store.reserve import reserve_given_away

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
    time and exits 0. A configuration error exits 78 and a file this user cannot
    read exits 77, both before anything starts and each on one line per problem
    (the unit does not restart on 77 or 78); a store that cannot be opened exits 74,
    and so does a store found damaged while running (after an orderly stop).
    Any other failure of a device connection, a forwarder or the recorder is
    logged, counted and that task restarted; the service stays up.
    """
    from agent.service.run import serve  # imports the protocol libraries: only when running

    logs.setup(log_level)
    path = config_path or ctx.obj.config
    try:
        cfg = load_apart(path)  # the parse's memory stays in a child (agent.service.config_apart)
    except ConfigError as exc:
        click.echo(f"edge-agent: configuration error:\n{exc}", err=True)
        sys.exit(EX_CONFIG)
    for warning in cfg.warnings:  # said once per start, as `check` says it
        click.echo(f"edge-agent: configuration warning: {warning}", err=True)
    refuse_unreadable(cfg, ctx.obj.db_path or cfg.store.path)
    try:
        code = asyncio.run(serve(cfg, db=ctx.obj.db_path))
    except StoreError as exc:
        click.echo(f"edge-agent: {exc}", err=True)
        sys.exit(EX_IOERR)
    except PermissionError as exc:  # a file that became unreadable after the check above
        click.echo(f"edge-agent: cannot read {exc.filename}: {exc.strerror} (as uid {os.getuid()})", err=True)
        sys.exit(EX_NOPERM)
    sys.exit(code)


def refuse_unreadable(cfg: Config, store_path: str) -> None:
    """Before anything starts: one line per file this process cannot read, exit 77 (the unit does
    not restart on it)."""
    problems = unreadable_now(cfg, store_path)
    for line in problems:
        click.echo(f"edge-agent: {line} (as uid {os.getuid()})", err=True)
    if problems:
        sys.exit(EX_NOPERM)


@click.command("status")
@click.option("-c", "--config", "config_path", metavar="FILE", help="Gateway configuration (YAML).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.option(
    "--stale-after",
    type=click.FloatRange(min=0.1),
    default=STALE_AFTER_S,
    show_default=True,
    metavar="SECONDS",
    help="A live service whose last state is older than this is reported as not responding.",
)
@click.pass_context
def status_cmd(ctx: click.Context, config_path: str | None, as_json: bool, stale_after: float) -> None:
    """Show the running service's state, read from the store (no socket into the service).

    The service: running, not responding, or stopped. The service records its
    PID and rewrites its state every few seconds; `running` means that PID is
    alive and the state is fresh, `not responding since ...` a live PID whose
    state is older than --stale-after, `stopped` a PID that is gone (shown at
    once, whatever the age of the last state). A failing task is named.
    Per device connection: state, last poll, current boot id, the last error
    in full. Per upstream: backlog, oldest pending age, delivered, dead
    letters, the last error in full. The store: size, free space, days of
    history that fit.
    """
    obj: Context = ctx.obj
    if config_path:
        obj.config = config_path

    async def go() -> dict[str, Any]:
        async with await obj.open_reader() as reader:
            return await collect_status(reader, obj.config, stale_after)

    status = run_async(go)
    if as_json:
        click.echo(json.dumps(status, indent=2))
        return
    for line in status_lines(status):
        click.echo(line)


async def collect_status(
    reader: Reader, config_path: str, stale_after_s: float = STALE_AFTER_S
) -> dict[str, Any]:
    """What `status --json` prints: the service's live state and liveness, upstreams, the store's budget."""
    now = datetime.now(UTC)
    live_row = await reader.live_state("service")
    service: dict[str, Any] | None = None
    updated_at, age = None, None
    pid: int | None = None
    if live_row is not None:
        updated_at, state = live_row
        service = json.loads(state)
        age = (now - parse_timestamp(updated_at, "updated_at")).total_seconds()
        service["updated_at"], service["age_s"] = updated_at, round(age, 1)
        pid = service.get("pid") if isinstance(service.get("pid"), int) else None
    alive = process.alive(pid, (service or {}).get("process")) if pid is not None else None
    life = liveness(pid, alive, updated_at, age, stale_after_s)
    running = life.state == RUNNING
    retention, quota, reserve = None, None, 0
    with contextlib.suppress(ConfigError, OSError):  # status works with --db alone, too
        store_cfg = load(config_path, check_files=False).store
        retention, quota, reserve = store_cfg.retention, store_cfg.max_size, store_cfg.reserve
    high_water = retention.high_water if isinstance(retention, RetentionSettings) else 0.8
    keep = retention.payloads.days if isinstance(retention, RetentionSettings) else None
    facts = await reader.measure(now, quota)
    if given := reserve_given_away(reader.path, reserve):  # released for the last commits: no room
        facts = replace(facts, fs_free_bytes=max(0, facts.fs_free_bytes - given))
    b = budget.assess(facts, high_water, keep)
    upstreams = [asdict(c) for c in await reader.outbox_counts()]
    return {
        "now": format_timestamp(now),
        "store": {
            "path": reader.path,
            **asdict(b),
            "problem": store_problem(service, running, b.fs_free_bytes),
        },
        "running": running,
        "liveness": asdict(life),
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
    """`status` for people: the service and its devices, the upstreams, the store.
    Tables hold the short facts; every error cause follows its table in full, wrapped."""
    out = _service_lines(status)
    out.append("")
    out.append("upstreams:")
    ups = status["upstreams"]
    live_ups = ((status.get("service") or {}).get("upstreams")) or {}
    if ups:
        out += _upstream_lines(ups, live_ups)
    else:
        out.append("  none configured")
    return out + _store_lines(status["store"])


_KNOWN_LIVE = {
    "process",
    "started_at",
    "pid",
    "config",
    "connections",
    "upstreams",
    "recorder",
    "store_problem",
    "updated_at",
    "age_s",
    "storage",
    "config_hash",
    "config_loaded_at",
    "last_reload",
    "reloads",
}


def _headline(status: dict[str, Any]) -> str:
    svc = status["service"]
    life = status.get("liveness") or {}
    state = life.get("state", RUNNING if status["running"] else STOPPED)
    at, age = svc.get("updated_at"), svc.get("age_s")
    elsewhere = life.get("pid_alive") is None and (svc.get("process") or {}).get("host")
    if state == RUNNING and elsewhere:
        word = f"running by its last state {age} s ago (written on host {elsewhere}, not checked from here)"
    elif state == RUNNING:
        word = f"running (last state {age} s ago)"
    elif state == NOT_RESPONDING:
        word = f"NOT RESPONDING since {at} (the process is alive but has written no state for {age} s)"
    else:
        word = f"STOPPED (the process is gone; its last state was written at {at})"
    return (
        f"service: {word}, pid {svc.get('pid')}, started {svc.get('started_at')}, config {svc.get('config')}"
    )


def _service_lines(status: dict[str, Any]) -> list[str]:
    svc = status["service"]
    if svc is None:
        return ["service: has never run against this store"]
    out = [_headline(status)]
    if svc.get("store_problem"):
        out += render.wrapped("ALARM", svc["store_problem"])
    rec = svc.get("recorder") or {}
    if rec.get("store_problem"):
        out += render.wrapped("STORE CANNOT BE WRITTEN", rec["store_problem"])
    out += _failing_lines(svc)
    if svc.get("storage"):
        out.append(wear.storage_line(svc["storage"]))
    out += config_lines(svc)
    for key in sorted(set(svc) - _KNOWN_LIVE - _FAILING_KEYS):
        if svc[key] not in (None, {}, []):
            out += render.wrapped(key.replace("_", " "), render.cell(svc[key]))
    out.append("")
    running = status["running"]
    out.append("devices:" if running else "devices (as last recorded):")
    fields = ("device", "receiver", "state", "last_poll_at", "boot_id", "polls", "read_errors")
    conns = svc.get("connections") or []
    rows = [[c.get(f) for f in fields] for c in conns]
    headers = ["device", "connection", "state", "last poll", "bootId", "polls", "errors"]
    out += render.table(headers, rows)
    for c in conns:
        if c.get("last_error"):
            out += render.wrapped(f"{c['device']} via {c['receiver']}: last error", c["last_error"])
        for what, problem in sorted((c.get("problems") or {}).items()):
            out += render.wrapped(f"{c['device']} via {c['receiver']}: {what}", problem)
    return out


# Live-state fields that name a failing task; the supervisor writes one of these shapes:
#   tasks: [{"name", "state", "failures", "restarts", "last_error"}] (or {name: {...}});
#   failing_task: "name" or {"name", "error", ...}; failing_tasks: [...]
_FAILING_KEYS = {"failing_task", "failing_tasks", "tasks"}
_QUIET_STATES = (None, "running", "ok", "stopped")


def _tasks_of(svc: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    one = svc.get("failing_task")
    if isinstance(one, str) and one:
        found.append({"name": one, "state": "failing"})
    elif isinstance(one, dict) and one:
        found.append({"state": "failing", **one})
    many = svc.get("failing_tasks")
    if isinstance(many, list):
        found += [
            {"state": "failing", **t} if isinstance(t, dict) else {"name": str(t), "state": "failing"}
            for t in many
        ]
    tasks = svc.get("tasks")
    if isinstance(tasks, dict):
        found += [{"name": name, **t} for name, t in tasks.items() if isinstance(t, dict)]
    elif isinstance(tasks, list):
        found += [t for t in tasks if isinstance(t, dict)]
    return found


def _failing_lines(svc: dict[str, Any]) -> list[str]:
    """A FAILING TASK line for each task the service reports failing, and a line for each that
    failed and was restarted, each with its last error in full."""
    out: list[str] = []
    for t in _tasks_of(svc):
        name = t.get("name") or t.get("task") or "?"
        cause = t.get("error") or t.get("last_error") or ""
        failing = t.get("state") not in _QUIET_STATES
        if not failing and not t.get("failures"):
            continue
        extra = ", ".join(
            f"{k} {t[k]}"
            for k in ("state", "failures", "restarts", "since")
            if t.get(k) not in (None, "failing")
        )
        text = f"{name}" + (f" ({extra})" if extra else "") + (f": {cause}" if cause else "")
        out += render.wrapped("FAILING TASK" if failing else "task restarted after failing", text)
    return out


def _upstream_lines(ups: list[dict[str, Any]], live: dict[str, Any]) -> list[str]:
    headers = ["upstream", "link", "pending", "oldest pending", "delivered", "dead letters", "attempts"]
    rows = []
    for u in ups:
        up = (live.get(u["upstream"]) or {}).get("up")
        link = "-" if up is None else ("up" if up else "DOWN")
        rows.append(
            [
                u["upstream"],
                link,
                u["pending"],
                u["oldest_pending_at"],
                u["delivered"],
                u["rejected"],
                u["attempts"],
            ]
        )
    out = render.table(headers, rows)
    for u in ups:
        name = u["upstream"]
        forwarder_error = (live.get(name) or {}).get("last_error")
        if forwarder_error:
            out += render.wrapped(f"{name}: last error", forwarder_error)
        if u.get("head_error") and u["head_error"] != forwarder_error:
            out += render.wrapped(f"{name}: oldest pending row's last error", u["head_error"])
        if u.get("last_rejection"):
            out += render.wrapped(f"{name}: last rejection", u["last_rejection"])
        if live and name not in live:  # removed from the configuration: its rows stay in the store
            out.append(f"  {name}: not in the configuration in force; its rows stay (`edge-agent outbox`)")
        if u.get("awaiting_receipt"):
            out.append(
                f"  {name}: {u['awaiting_receipt']} sent, awaiting the ledger's receipt"
                f" (oldest acknowledged by the broker at {u.get('oldest_awaiting_at')})"
            )
        if (live.get(name) or {}).get("kind") == "sparkplug":
            out.append(_sparkplug_line(name, live[name]))
    return out


def _sparkplug_line(name: str, sp: dict[str, Any]) -> str:
    """One line of a Sparkplug session: connected, bdSeq, the primary host, rows in their window."""
    host = sp.get("primary_host")
    online = {True: "online", False: "OFFLINE", None: "not seen"}[sp.get("primary_host_online")]
    return (
        f"  {name}: Sparkplug {'connected' if sp.get('connected') else 'NOT connected'}, "
        f"bdSeq {sp.get('bd_seq')}, primary host {f'{host} {online}' if host else 'none'}, "
        f"{sp.get('in_window', 0)} rows waiting for their window (2 x keepalive)"
    )


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
