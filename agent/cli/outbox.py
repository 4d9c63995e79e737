"""`edge-agent outbox`, `edge-agent outbox retry` and `edge-agent replay`: the delivery side, for operators.

These commands only read and requeue outbox rows in the store; the running
service's forwarder does the sending (it picks requeued rows up within its
poll interval). Ids never change: a resent event carries the same (source,
id) with the next `attempt` number and `replayed: true`. The listing opens only the store's
reader; `retry` and `replay` need an existing store (exit 66 otherwise). No SQL here.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from agent.cli import render
from agent.cli.context import Context, run_async
from agent.core.contract import ContractError
from agent.core.timestamps import format_timestamp, parse_timestamp
from agent.store.outbox_counts import UpstreamCounts

_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d)")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_when(text: str, now: datetime) -> str:
    """An RFC 3339 instant, or a time back from now (`90m`, `12h`, `7d`), as normalised UTC text."""
    m = _RELATIVE.fullmatch(text.strip())
    if m:
        return format_timestamp(now - timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2)]))
    try:
        return format_timestamp(parse_timestamp(text, "time"))
    except ContractError as exc:
        raise click.BadParameter(
            f"{text!r}: give RFC 3339 (2026-04-22T08:00:00Z) or an age (90m, 12h, 7d)"
        ) from exc


def _row(c: UpstreamCounts, now: datetime) -> dict[str, Any]:
    age = None
    if c.oldest_pending_at is not None:
        age = round((now - parse_timestamp(c.oldest_pending_at, "created_at")).total_seconds(), 3)
    return {
        "upstream": c.upstream,
        "pending": c.pending,
        "oldest_pending_at": c.oldest_pending_at,
        "oldest_pending_age_s": age,
        "awaiting_receipt": c.awaiting_receipt,
        "oldest_awaiting_at": c.oldest_awaiting_at,
        "delivered": c.delivered,
        "rejected": c.rejected,
        "delivery_attempts": c.attempts,
        "last_error": c.head_error,
        "last_rejection": c.last_rejection,
    }


@click.group("outbox", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per upstream and line.")
@click.pass_context
def outbox_cmd(ctx: click.Context, as_json: bool) -> None:
    """Delivery state per upstream: pending, oldest pending age, sent and awaiting the ledger's
    receipt (upstreams with `receipts: true`), delivered, rejected, last error.

    Rejected rows are dead letters: the upstream refused them, they are never
    retried automatically; `edge-agent outbox retry` queues them again.
    Source events, arrivals and delivery attempts are counted apart.
    """
    if ctx.invoked_subcommand is not None:
        return
    now = datetime.now(UTC)

    obj: Context = ctx.obj

    async def go() -> tuple[list[dict[str, Any]], dict[str, int]]:
        async with await obj.open_reader() as reader:
            return [_row(c, now) for c in await reader.outbox_counts()], await reader.summary()

    rows, summary = run_async(go)
    if as_json:
        for r in rows:
            click.echo(json.dumps(r, ensure_ascii=False))
        return
    click.echo(
        f"source events: {summary['source_events']}   arrivals: {summary['arrivals']}"
        f"   delivery attempts: {summary['delivery_attempts']}"
    )
    if not rows:
        click.echo("no upstreams registered")
        return
    for line in _table(rows):
        click.echo(line)


def _table(rows: list[dict[str, Any]]) -> list[str]:
    headers = [
        "upstream",
        "pending",
        "oldest pending",
        "awaiting receipt",
        "delivered",
        "rejected",
        "attempts",
        "last error",
    ]
    table = [
        [
            r["upstream"],
            r["pending"],
            "-" if r["oldest_pending_age_s"] is None else f"{r['oldest_pending_age_s']:.0f} s",
            r["awaiting_receipt"],
            r["delivered"],
            r["rejected"],
            r["delivery_attempts"],
            r["last_error"] or r["last_rejection"] or "",
        ]
        for r in rows
    ]
    return render.table(headers, table, 60)


@outbox_cmd.command("retry")
@click.option("--upstream", metavar="NAME", help="Only this upstream's dead letters (default: all).")
@click.option(
    "--id", "ids", type=int, multiple=True, metavar="OUTBOX_ID", help="Only these rows (repeatable)."
)
@click.pass_obj
def retry_cmd(obj: Context, upstream: str | None, ids: tuple[int, ...]) -> None:
    """Queue dead letters (rejected rows) again, once what made the upstream refuse them is fixed."""

    async def go() -> int:
        async with await obj.open_existing_store() as store:
            return await store.outbox.retry_rejected(upstream, ids)

    n = run_async(go)
    click.echo(f"requeued {n} dead letter{'s' if n != 1 else ''}; the running forwarder sends them again")


@click.command("replay")
@click.option("--since", required=True, metavar="WHEN", help="RFC 3339 instant, or an age like 90m, 12h, 7d.")
@click.option("--until", metavar="WHEN", help="End of the range (exclusive); default: now.")
@click.option("--upstream", required=True, metavar="NAME", help="The upstream to send the range to again.")
@click.pass_obj
def replay_cmd(obj: Context, since: str, until: str | None, upstream: str) -> None:
    """Send records queued for an upstream in a time range again, on an operator's request.

    Delivered rows whose records were queued in [--since, --until) become
    pending; the forwarder resends them with the same ids, the next attempt
    number and `replayed: true`, so receivers deduplicate them.
    """
    now = datetime.now(UTC)
    start = parse_when(since, now)
    end = parse_when(until, now) if until is not None else None

    async def go() -> int:
        async with await obj.open_existing_store() as store:
            known = {c.upstream for c in await store.outbox.counts()}
            if upstream not in known:
                raise click.BadParameter(
                    f"no upstream {upstream!r}; known: {', '.join(sorted(known)) or 'none'}"
                )
            return await store.outbox.replay(upstream, start, end)

    n = run_async(go)
    click.echo(f"queued {n} record{'s' if n != 1 else ''} for {upstream} again (since {start})")
