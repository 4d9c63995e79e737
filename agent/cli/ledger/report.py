"""`edge-agent ledger report`: the whole ledger from one snapshot, as tables or one JSON object."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import click

from agent.cli.ledger.context import LedgerContext, run_ledger

if TYPE_CHECKING:
    import psycopg


async def _json_list(w: Callable[[str], Any], name: str, rows: AsyncIterator[dict[str, Any]]) -> None:
    w(f', "{name}": [')
    first = True
    async for row in rows:
        w(("" if first else ", ") + json.dumps(row, ensure_ascii=False))
        first = False
    w("]")


@click.command("report")
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
                    await write_tables(conn, summary, limit or None)
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


async def write_tables(
    conn: psycopg.AsyncConnection[tuple[Any, ...]], summary: dict[str, int], limit: int | None
) -> None:
    from agent.cli import render
    from agent.cli.ledger import tables as lt
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
