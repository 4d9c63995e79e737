"""`edge-agent ledger ...`: the central ledger's commands (migrate, import, report).

The ledger's modules need psycopg (the optional extra `edge-agent[ledger]`), so they are
imported inside each command: a gateway without the extra still runs every other command, and
`edge-agent ledger` without it says what to install.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agent.cli.context import EX_CONFIG, EX_IOERR, EX_UNAVAILABLE
from agent.core.errors import ConfigError

if TYPE_CHECKING:
    import psycopg

T = TypeVar("T")

LEDGER_EXIT_HELP = (
    "Exit codes: 0 ok, 1 unexpected error, 2 usage, 69 PostgreSQL could not be reached, 74 the ledger "
    "could not be written or its schema is not this program's, 78 configuration error or the ledger "
    "extra is not installed."
)


class LedgerContext:
    def __init__(self, dsn: str | None) -> None:
        self.dsn = dsn

    async def open(self, *, migrate: bool) -> psycopg.AsyncConnection[tuple[Any, ...]]:
        """A connection; with `migrate`, the schema brought up to date, else checked."""
        from agent.ledger import migrations
        from agent.ledger.connection import connect

        conn = await connect(self.dsn)
        try:
            if migrate:
                await migrations.migrate(conn)
            else:
                await migrations.check(conn)
        except Exception:
            await conn.close()
            raise
        return conn


def _require_extra() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        click.echo(
            "edge-agent: the ledger needs its optional dependencies: pip install 'edge-agent[ledger]'",
            err=True,
        )
        sys.exit(EX_CONFIG)


def run_ledger(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a ledger command's coroutine and map the ledger's errors to exit codes."""
    from agent.ledger.errors import LedgerError, LedgerUnavailable

    try:
        return asyncio.run(fn())  # type: ignore[arg-type]
    except ConfigError as exc:
        click.echo(f"edge-agent ledger: configuration error: {exc}", err=True)
        sys.exit(EX_CONFIG)
    except LedgerUnavailable as exc:
        click.echo(f"edge-agent ledger: {exc}", err=True)
        sys.exit(EX_UNAVAILABLE)
    except LedgerError as exc:
        click.echo(f"edge-agent ledger: {exc}", err=True)
        sys.exit(EX_IOERR)


@click.group("ledger", epilog=LEDGER_EXIT_HELP)
@click.option(
    "--dsn",
    metavar="DSN",
    envvar="EDGE_LEDGER_DSN",
    help="PostgreSQL connection (URI or key=value). Default: the libpq environment "
    "(PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSFILE). Never put a password here: use PGPASSFILE.",
)
@click.pass_context
def ledger_group(ctx: click.Context, dsn: str | None) -> None:
    """The central ledger: many gateways' events in one PostgreSQL, arbitrated by unique keys.

    Takes the gateways' CloudEvents over MQTT and HTTP (`run`) or an offline file (`import`):
    one canonical event per (source, transitionId, bootId), every arrival kept with its gateway.
    The connection is --dsn, else EDGE_LEDGER_DSN, else libpq's environment (PGHOST, PGPORT,
    PGDATABASE, PGUSER, PGPASSFILE). Every command's --help has examples.

    \b
      export PGHOST=127.0.0.1 PGDATABASE=ledger PGUSER=ledger PGPASSFILE=~/.pgpass
      edge-agent ledger migrate
      edge-agent ledger run -c /etc/edge-ledger/ledger.yaml
      edge-agent ledger report
      edge-agent ledger --dsn "host=/run/postgresql dbname=ledger" import capture.jsonl --json
      edge-agent ledger demo                     # two gateways, one PLC, one broker on 1883
    """
    _require_extra()
    ctx.obj = LedgerContext(dsn)


@ledger_group.command("migrate")
@click.pass_obj
def migrate_cmd(obj: LedgerContext) -> None:
    """Create or upgrade the ledger schema (numbered migrations; a newer schema is refused).

    `run`, `import` and `demo` migrate by themselves; this does only that, e.g. before a rollout.

    \b
      edge-agent ledger migrate
      edge-agent ledger --dsn "host=/run/postgresql dbname=ledger" migrate

    Exit 0 migrated (or nothing to do), 69 PostgreSQL unreachable, 74 the schema is newer than
    this program or a migration failed (that migration is rolled back).
    """
    from agent.ledger import migrations

    async def go() -> list[int]:
        from agent.ledger.connection import connect

        c = await connect(obj.dsn)
        try:
            return await migrations.migrate(c)
        finally:
            await c.close()

    applied = run_ledger(go)
    total = len(migrations.migrations())
    if applied:
        click.echo(f"ledger schema migrated to version {total} (applied {', '.join(map(str, applied))})")
    else:
        click.echo(f"ledger schema is at version {total}; nothing to do")


@ledger_group.command("check")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: schema version, server, replication.")
@click.pass_obj
def check_cmd(obj: LedgerContext, as_json: bool) -> None:
    """Exit 0 when the schema is this program's latest; 74 while a migration is pending (or newer).
    Also says which server the DSN reached and its replication state (synchronous_standby_names,
    synchronous_commit, the standbys in pg_stat_replication): ledger.md section 7.

    \b
      edge-agent ledger check || edge-agent ledger migrate

    Exit 0 up to date, 69 PostgreSQL unreachable, 74 a migration is pending or the schema is newer.
    """
    from agent.ledger import failover, migrations
    from agent.ledger.writer import conn_info

    async def go() -> tuple[str, failover.ReplicationState]:
        conn = await obj.open(migrate=False)
        try:
            return conn_info(conn), await failover.replication_state(conn)
        finally:
            await conn.close()

    server, state = run_ledger(go)
    version = len(migrations.migrations())
    if as_json:
        click.echo(json.dumps({"schema_version": version, "server": server, "replication": state.as_json()}))
        return
    click.echo(f"ledger schema is at version {version}")
    click.echo(f"replication on {server}: {state.describe()}")


@ledger_group.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--json", "as_json", is_flag=True, help="One JSON result per non-blank line, after commit.")
@click.option(
    "--gateway",
    metavar="NAME",
    default="import",
    show_default=True,
    help="Gateway recorded for lines without their own `gateway` field.",
)
@click.pass_obj
def import_cmd(obj: LedgerContext, file: str, as_json: bool, gateway: str) -> None:
    """Ingest FILE (the offline JSON Lines file of the contract) into the ledger.

    Each batch is one transaction; with --json its result lines (exactly as `edge-agent import
    --json`) are printed only after it committed. Unparseable lines are kept as `rejected`.

    \b
      edge-agent ledger import capture.jsonl --json
      edge-agent ledger import line-7.jsonl --gateway line-7

    Exit 0 every line stored, 69 PostgreSQL unreachable, 74 the ledger could not be written.
    """
    from agent.cli.records import ImportTally, _json_results
    from agent.ledger import arbiter
    from agent.ledger.arrivals import file_digest, from_import
    from agent.sources.importer import read_batches

    tally = ImportTally()

    async def go() -> None:
        conn = await obj.open(migrate=True)
        try:
            digest = file_digest(file)  # (digest, line) is each line's arrival key: a re-run adds none
            for batch in read_batches(file, receiver=f"ledger-import:{gateway}"):
                arrivals = [from_import(it, gateway, digest) for it in batch.items]
                outcomes = await arbiter.record(conn, arrivals)
                if as_json:
                    sys.stdout.write(_json_results(batch.lines, outcomes))
                    sys.stdout.flush()
                tally.add(batch.lines, outcomes)
        finally:
            await conn.close()

    run_ledger(go)
    if not as_json:
        for line in tally.lines(file):
            click.echo(line)


@ledger_group.command("run")
@click.option(
    "-c",
    "--config",
    "config_path",
    metavar="FILE",
    default="/etc/edge-ledger/ledger.yaml",
    show_default=True,
    help="Ledger configuration (YAML): dsn, mqtt and/or http intake, notify rules.",
)
@click.pass_obj
def run_cmd(obj: LedgerContext, config_path: str) -> None:
    """Run the intakes until SIGTERM (then drain and exit 0); the group's --dsn wins over the config's.

    MQTT (shared subscription, PUBACK after commit) and/or HTTP (2xx after commit) as the
    config says, and the notification workers. While PostgreSQL is away it keeps running and
    acknowledges nothing (HTTP answers 503). The schema is migrated on start.

    \b
      edge-agent ledger run -c ledger.yaml
      edge-agent ledger --dsn "host=/run/postgresql dbname=ledger" run -c ledger.yaml

    Exit 0 after SIGTERM, 74 the schema is newer than this program, 78 a configuration error
    (every problem, each with file:line).
    """
    import logging

    from agent.ledger import config, service

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    async def go() -> None:
        cfg = config.load(config_path)
        await service.run(cfg, dsn=obj.dsn)

    run_ledger(go)


@ledger_group.command("demo")
@click.option(
    "--mqtt",
    "mqtt",
    metavar="HOST:PORT",
    default="127.0.0.1:1883",
    show_default=True,
    help="The MQTT broker the gateways publish to and the ledger subscribes at.",
)
@click.option(
    "--seconds",
    default=15.0,
    show_default=True,
    type=click.FloatRange(3, 3600),
    help="How long the PLC runs.",
)
@click.option(
    "--keep", metavar="DIR", help="Put configs, stores and logs here (default: a new temporary directory)."
)
@click.pass_obj
def demo_cmd(obj: LedgerContext, mqtt: str, seconds: float, keep: str | None) -> None:
    """Two gateways, one simulated PLC, one canonical event with two arrivals.

    Starts a simulated PLC (Modbus TCP, a free port), two `edge-agent run` gateways (gw-1,
    gw-2) that read it and publish over MQTT, and `edge-agent ledger run` on a topic of the
    demo's own; after --seconds it stops them all, prints the ledger's report and checks that
    each of the demo's events is one canonical event with an arrival from each gateway. The
    ledger database is migrated if needed; the demo's events stay in it (source demo-XXXXXX/...).

    \b
      edge-agent ledger --dsn "host=127.0.0.1 dbname=ledger" demo
      edge-agent ledger demo --mqtt 127.0.0.1:1883 --seconds 30 --keep ./ledger-demo

    Exit 0 when every demo event has arrivals from both gateways, 1 when not (or a part did not
    start; its log is named), 69 no broker at --mqtt or PostgreSQL unreachable, 74/78 as for every
    ledger command.
    """
    from agent.cli import ledger_demo
    from agent.core.wording import counted
    from agent.ledger import report

    host, _, port = mqtt.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(f"{mqtt!r} must be HOST:PORT, e.g. 127.0.0.1:1883", param_hint="--mqtt")
    why = ledger_demo.broker_reachable(host, int(port))
    if why is not None:
        click.echo(f"edge-agent ledger demo: {why}: start one (e.g. mosquitto) or give --mqtt", err=True)
        sys.exit(EX_UNAVAILABLE)

    async def migrate() -> None:
        conn = await obj.open(migrate=True)
        await conn.close()

    run_ledger(migrate)
    t0 = time.monotonic()

    def say(text: str) -> None:
        click.echo(f"[{time.monotonic() - t0:5.1f}s] {text}")

    try:
        work, site = ledger_demo.run(
            dsn=obj.dsn, mqtt_host=host, mqtt_port=int(port), seconds=seconds, keep=keep, say=say
        )
    except ledger_demo.DemoFailed as exc:
        click.echo(f"edge-agent ledger demo: {exc}", err=True)
        sys.exit(1)

    async def show() -> dict[str, int]:
        conn = await obj.open(migrate=False)
        try:
            async with report.snapshot(conn):
                click.echo("")
                await _write_tables(conn, await report.summary(conn), 40)
                return await report.site_tally(conn, site)
        finally:
            await conn.close()

    tally = run_ledger(show)
    click.echo("")
    click.echo(
        f"demo ({site}): {tally['events']} canonical events from {tally['arrivals']} arrivals;"
        f" {tally['from_both']} of them arrived from both gateways;"
        f" {counted(tally['boots'], 'boot')} observed."
    )
    click.echo(f"configs, stores and logs: {work}")
    if tally["events"] == 0 or tally["from_both"] != tally["events"]:
        click.echo(
            "edge-agent ledger demo: not every event arrived from both gateways; see the logs", err=True
        )
        sys.exit(1)


@ledger_group.group("notifications", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per row, one per line.")
@click.pass_context
def notifications_group(ctx: click.Context, as_json: bool) -> None:
    """The notification outbox: every row with its state, attempts and last error.

    A table for people (each dead row's last error in full), or one JSON object per row.

    \b
      edge-agent ledger notifications
      edge-agent ledger notifications --json | jq 'select(.state == "dead")'
      edge-agent ledger notifications retry --id 42

    Exit 0, 69 PostgreSQL unreachable, 74 the schema is not this program's.
    """
    if ctx.invoked_subcommand is not None:
        return
    from agent.ledger import notifications

    obj: LedgerContext = ctx.obj

    async def go() -> list[dict[str, Any]]:
        conn = await obj.open(migrate=False)
        try:
            return await notifications.listing(conn)
        finally:
            await conn.close()

    rows = run_ledger(go)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
    else:
        from agent.cli.ledger_tables import notification_lines

        for line in notification_lines(rows):
            click.echo(line)


@notifications_group.command("retry")
@click.option("--id", "ids", type=int, multiple=True, help="Only these rows (default: every dead row).")
@click.option(
    "--attempts", default=5, show_default=True, type=click.IntRange(1, 1000), help="Attempts to give."
)
@click.pass_obj
def retry_cmd(obj: LedgerContext, ids: tuple[int, ...], attempts: int) -> None:
    """Make dead notifications pending again (an operator's decision; the ledger never does it).

    They keep their idempotency key, so a receiver that got one before sees it again as a repeat.

    \b
      edge-agent ledger notifications retry                 # every dead row, 5 more attempts
      edge-agent ledger notifications retry --id 42 --attempts 1

    Exit 0, 69 PostgreSQL unreachable, 74 the schema is not this program's.
    """
    from agent.ledger import notifications

    async def go() -> int:
        conn = await obj.open(migrate=False)
        try:
            return await notifications.retry_dead(conn, ids=ids, more_attempts=attempts)
        finally:
            await conn.close()

    click.echo(f"{run_ledger(go)} dead notifications are pending again")


async def _json_list(w: Callable[[str], Any], name: str, rows: AsyncIterator[dict[str, Any]]) -> None:
    w(f', "{name}": [')
    first = True
    async for row in rows:
        w(("" if first else ", ") + json.dumps(row, ensure_ascii=False))
        first = False
    w("]")


@ledger_group.command("report")
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object: summary, events, arrivals, boots, ..."
)
@click.option("--limit", type=int, default=100, show_default=True, help="Rows per table for people (0: all).")
@click.pass_obj
def report_cmd(obj: LedgerContext, as_json: bool, limit: int) -> None:
    """Canonical events, arrivals with their evidence, boots, gaps, anomalies, pending, conflicts.

    For people: the counts, then tables of canonical events (with their arrivals and gateways),
    open conflicts (both originals side by side), boots, gaps, anomalies, pending arrivals and
    notifications, at most --limit rows each. --json: the whole ledger in one object, streamed
    from one consistent snapshot.

    \b
      edge-agent ledger report
      edge-agent ledger report --limit 0 | less -S
      edge-agent ledger report --json | jq '.conflicts'

    Exit 0, 69 PostgreSQL unreachable, 74 the schema is not this program's (run `migrate`).
    """
    from agent.ledger import report

    async def go() -> None:
        conn = await obj.open(migrate=False)
        try:
            async with report.snapshot(conn):
                summary = await report.summary(conn)
                if as_json:
                    await _write_json(conn, summary)
                else:
                    await _write_tables(conn, summary, limit or None)
        finally:
            await conn.close()

    run_ledger(go)


async def _write_json(conn: psycopg.AsyncConnection[tuple[Any, ...]], summary: dict[str, int]) -> None:
    from agent.ledger import notifications, report

    w = sys.stdout.write
    w('{"summary": ' + json.dumps(summary))
    await _json_list(w, "events", report.events(conn))
    await _json_list(w, "arrivals", report.arrivals(conn))
    await _json_list(w, "boots", report.boots(conn))
    await _json_list(w, "gaps", report.anomalies(conn, gaps=True))
    await _json_list(w, "anomalies", report.anomalies(conn, gaps=False))
    await _json_list(w, "pending", report.pending(conn))
    await _json_list(w, "conflicts", report.conflicts(conn))
    w(', "notifications": ' + json.dumps(await notifications.listing(conn)))
    w("}\n")


async def _take(rows: AsyncGenerator[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """At most `limit` rows; the generator (and its server-side cursor) closed at once."""
    out: list[dict[str, Any]] = []
    async with aclosing(rows):
        async for row in rows:
            if limit is not None and len(out) >= limit:
                break
            out.append(row)
    return out


async def _write_tables(
    conn: psycopg.AsyncConnection[tuple[Any, ...]], summary: dict[str, int], limit: int | None
) -> None:
    from agent.cli import ledger_tables as lt
    from agent.cli import render
    from agent.ledger import notifications, report

    notes = await notifications.listing(conn)
    out = lt.summary_lines(summary, notes)
    evs = await _take(report.events(conn), limit)
    out += ["", "canonical events (by id):"]
    out += render.table(render.headers_of(lt.EVENT_COLUMNS), lt.cells(evs, lt.EVENT_COLUMNS))
    if limit is not None and summary["source_events"] > len(evs):
        out.append(f"... {summary['source_events'] - len(evs)} more (use --limit 0 or --json)")
    out += lt.conflict_lines(await _take(report.conflicts(conn), limit))
    out += lt.section("boots observed:", await _take(report.boots(conn), limit), render.BOOT_COLUMNS)
    out += lt.section("gaps:", await _take(report.anomalies(conn, gaps=True), limit), render.ANOMALY_COLUMNS)
    out += lt.section(
        "anomalies:", await _take(report.anomalies(conn, gaps=False), limit), render.ANOMALY_COLUMNS
    )
    out += lt.section(
        "pending (identity-incomplete arrivals waiting for a person):",
        await _take(report.pending(conn), limit),
        lt.PENDING_COLUMNS,
    )
    if notes:
        out += ["", "notifications:", *lt.notification_lines(notes[: limit or None])]
    for line in out:
        click.echo(line)
