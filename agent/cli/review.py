"""`edge-agent review conflicts|pending|mark`: what a person has to look at, and their notes on it.

`conflicts` and `pending` open only the store's reader (they never create, migrate or lock a
store; exit 66 when there is none); `mark` adds a review mark through the store's writer and
needs an existing store. Nothing is deleted or changed by a review. No SQL here.
"""

from __future__ import annotations

import csv
import getpass
import json
import sys
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from datetime import UTC, datetime
from typing import Any

import click

from agent.cli import render
from agent.cli.context import Context, run_async
from agent.core.review_mark import NotReviewable
from agent.core.spreadsheet import safe_row
from agent.core.timestamps import format_timestamp
from agent.store.reader import Reader

Rows = Callable[[Reader], AsyncGenerator[dict[str, Any], None]]


@click.group("review")
def review_cmd() -> None:
    """Review conflicts and identity-incomplete arrivals, and mark them reviewed with a note.

    \b
      edge-agent review conflicts            # both payloads of each conflict side by side
      edge-agent review pending --open       # identity-incomplete arrivals not yet reviewed
      edge-agent review mark 17 --note "PLC firmware resent with new severity; canonical kept"

    A mark is kept with the time and who made it; the arrival, its canonical event and
    the pending list stay as they are (nothing is deleted, nothing is merged).
    """


def _output_options(fn: Callable[..., None]) -> Callable[..., None]:
    fn = click.option("--open", "open_only", is_flag=True, help="Only those not marked reviewed yet.")(fn)
    fn = click.option("--csv", "as_csv", is_flag=True, help="CSV, one row each, every field in full.")(fn)
    fn = click.option(
        "--json", "as_json", is_flag=True, help="One JSON object per line, every field in full."
    )(fn)
    return fn


def _last_mark(rec: dict[str, Any]) -> str | None:
    if not rec["marks"]:
        return None
    m = rec["marks"][-1]
    by = f" by {m['marked_by']}" if m.get("marked_by") else ""
    return f"{m['marked_at']}{by}: {m['note']}"


def _reviewed_lines(rec: dict[str, Any]) -> list[str]:
    mark = _last_mark(rec)
    return render.wrapped("reviewed", mark) if mark else ["  not reviewed yet"]


def _more_lines(total: int, shown: int) -> list[str]:
    return [f"\n... {total - shown} more (use --limit 0, --json or --csv)"] if total > shown else []


async def _stream_out(
    reader: Reader,
    rows: Rows,
    as_json: bool,
    as_csv: bool,
    csv_row: Callable[[dict[str, Any]], list[Any]],
    csv_header: list[str],
) -> int:
    """JSON lines or CSV, row by row as they are read (memory stays flat). Returns the count."""
    n = 0
    writer = csv.writer(sys.stdout) if as_csv else None
    if writer is not None:
        writer.writerow(csv_header)
    async with aclosing(rows(reader)) as found:
        async for rec in found:
            if writer is not None:
                writer.writerow(safe_row(csv_row(rec)))
            else:
                sys.stdout.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    return n


async def _collect(rows: Rows, reader: Reader, limit: int | None) -> tuple[list[dict[str, Any]], int]:
    out: list[dict[str, Any]] = []
    total = 0
    async with aclosing(rows(reader)) as found:
        async for rec in found:
            total += 1
            if limit is None or len(out) < limit:
                out.append(rec)
    return out, total


def _run_listing(
    obj: Context,
    as_json: bool,
    as_csv: bool,
    limit: int,
    rows: Rows,
    csv_header: list[str],
    csv_row: Callable[[dict[str, Any]], list[Any]],
    lines_for_people: Callable[[list[dict[str, Any]], int], list[str]],
) -> None:
    if as_json and as_csv:
        raise click.UsageError("choose one of --json and --csv")

    async def go() -> list[str]:
        async with await obj.open_reader() as reader:
            if as_json or as_csv:
                await _stream_out(reader, rows, as_json, as_csv, csv_row, csv_header)
                return []
            found, total = await _collect(rows, reader, limit or None)
            return lines_for_people(found, total)

    for line in run_async(go):
        click.echo(line)


# --- conflicts ---------------------------------------------------------------------

CONFLICT_CSV = [
    "arrival_id",
    "canonical_id",
    "source",
    "transitionId",
    "bootId",
    "canonical_arrival_id",
    "canonical_arrivalAt",
    "canonical_receiver",
    "canonical_sourceTimestamp",
    "canonical_payload_hash",
    "canonical_payload",
    "conflicting_arrivalAt",
    "conflicting_receiver",
    "conflicting_sourceTimestamp",
    "conflicting_payload_hash",
    "conflicting_payload",
    "conflicting_raw",
    "reviewed",
    "last_review",
    "identity_basis",
]


def _conflict_csv(c: dict[str, Any]) -> list[Any]:
    a, b = c["canonical"], c["conflicting"]
    return [
        c["arrival_id"],
        c["canonical_id"],
        c["source"],
        c["transitionId"],
        c["bootId"],
        a["arrival_id"],
        a["arrivalAt"],
        a["receiver"],
        a["sourceTimestamp"],
        a["payload_hash"],
        render.cell(a["payload"]),
        b["arrivalAt"],
        b["receiver"],
        b["sourceTimestamp"],
        b["payload_hash"],
        render.cell(b["payload"]),
        b["raw"],
        "yes" if c["reviewed"] else "no",
        _last_mark(c) or "",
        c["identity_basis"],
    ]


def conflict_lines(found: list[dict[str, Any]], total: int) -> list[str]:
    """Per conflict: its key, then the canonical and the conflicting arrival side by side."""
    if not found:
        return ["no conflicts"]
    out = [f"{total} conflict{'s' if total != 1 else ''} (a key seen again with other content; both kept)"]
    for c in found:
        a, b = c["canonical"], c["conflicting"]
        out.append("")
        out.append(
            f"conflict arrival {c['arrival_id']}: {c['source']}  transitionId {c['transitionId']}"
            f"  bootId {c['bootId']}  basis {c['identity_basis']}  (canonical event {c['canonical_id']})"
        )
        payload_a = "(pruned by retention)" if a["payload"] is None and a["payload_hash"] else a["payload"]
        payload_b = b["payload"] if b["payload"] is not None else b["raw"]
        rows = [
            ["arrival", a["arrival_id"], b["arrival_id"]],
            ["arrivalAt", a["arrivalAt"], b["arrivalAt"]],
            ["receiver", a["receiver"], b["receiver"]],
            ["sourceTimestamp", a["sourceTimestamp"], b["sourceTimestamp"]],
            ["payload_hash", a["payload_hash"], b["payload_hash"]],
            ["payload", payload_a, payload_b],
        ]
        out += ["  " + line for line in render.table(["", "canonical (kept)", "conflicting"], rows, 64)]
        out += _reviewed_lines(c)
    return out + _more_lines(total, len(found))


@review_cmd.command("conflicts", short_help="Conflicts: both payloads side by side.")
@_output_options
@click.option(
    "--limit", type=int, default=100, show_default=True, help="Conflicts shown for people (0: all)."
)
@click.pass_obj
def conflicts_cmd(obj: Context, as_json: bool, as_csv: bool, open_only: bool, limit: int) -> None:
    """Each conflict beside the canonical it did not overwrite: arrival, receiver, source time,
    payload hash and payload of both, and the review marks.

    With --json, one object per line: {"arrival_id", "canonical_id", "source",
    "transitionId", "bootId", "identity_basis", "canonical": {...}, "conflicting": {..., "raw"},
    "reviewed", "marks": [{"note", "marked_at", "marked_by"}]}.
    """
    _run_listing(
        obj,
        as_json,
        as_csv,
        limit,
        lambda r: r.conflicts(open_only=open_only),
        CONFLICT_CSV,
        _conflict_csv,
        conflict_lines,
    )


# --- pending -----------------------------------------------------------------------

PENDING_CSV = [
    "arrival_id",
    "arrivalAt",
    "receiver",
    "line",
    "source",
    "transitionId",
    "bootId",
    "sourceTimestamp",
    "reason",
    "raw",
    "reviewed",
    "last_review",
    "identity_basis",
]


def _pending_csv(p: dict[str, Any]) -> list[Any]:
    reviewed = "yes" if p["reviewed"] else "no"
    return [*(p[f] for f in PENDING_CSV[:10]), reviewed, _last_mark(p) or "", p["identity_basis"]]


def pending_lines(found: list[dict[str, Any]], total: int) -> list[str]:
    """Per identity-incomplete arrival: what identified it, why it is incomplete, its raw text."""
    if not found:
        return ["no identity-incomplete arrivals"]
    out = [
        f"{total} identity-incomplete arrival{'s' if total != 1 else ''} "
        "(kept, never merged, no boot id made up for them)"
    ]
    for p in found:
        out.append("")
        where = f"line {p['line']} of " if p["line"] is not None else ""
        out.append(f"arrival {p['arrival_id']}  at {p['arrivalAt']}  from {where}{p['receiver']}")
        out.append(
            f"  source {render.cell(p['source'])}  transitionId {render.cell(p['transitionId'])}"
            f"  bootId {render.cell(p['bootId'])}  sourceTimestamp {render.cell(p['sourceTimestamp'])}"
            f"  basis {render.cell(p['identity_basis'])}"
        )
        out += render.wrapped("why", p["reason"] or "-")
        out += render.wrapped("raw", p["raw"])
        out += _reviewed_lines(p)
    return out + _more_lines(total, len(found))


@review_cmd.command("pending", short_help="Identity-incomplete arrivals, raw evidence.")
@_output_options
@click.option("--limit", type=int, default=100, show_default=True, help="Arrivals shown for people (0: all).")
@click.pass_obj
def pending_review_cmd(obj: Context, as_json: bool, as_csv: bool, open_only: bool, limit: int) -> None:
    """Identity-incomplete arrivals with their raw evidence (the text as it arrived), why the
    identity is incomplete, where they came from, and the review marks.

    With --json, one object per line: {"arrival_id", "arrivalAt", "receiver", "line",
    "source", "transitionId", "bootId", "sourceTimestamp", "reason", "raw",
    "identity_basis", "reviewed", "marks": [...]}.
    """
    _run_listing(
        obj,
        as_json,
        as_csv,
        limit,
        lambda r: r.pending_review(open_only=open_only),
        PENDING_CSV,
        _pending_csv,
        pending_lines,
    )


# --- mark --------------------------------------------------------------------------


def _who() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


@review_cmd.command("mark", short_help="Mark one reviewed, with a note.")
@click.argument("arrival_id", type=int)
@click.option("--note", required=True, metavar="TEXT", help="What was found or decided (kept with the mark).")
@click.option("--by", metavar="NAME", help="Who reviewed it (default: the login name).")
@click.pass_obj
def mark_cmd(obj: Context, arrival_id: int, note: str, by: str | None) -> None:
    """Mark the conflict or identity-incomplete arrival ARRIVAL_ID reviewed, with a note.

    The mark is added to the store with the time and who made it; earlier marks are
    kept too. Nothing is deleted, merged or changed: the arrival stays in `review`
    listings (shown as reviewed; --open hides it) and in `report`.
    """
    if not note.strip():
        raise click.BadParameter("the note is empty: say what was found or decided", param_hint="--note")
    at = format_timestamp(datetime.now(UTC))

    async def go() -> str:
        async with await obj.open_existing_store() as store:
            try:
                m = await store.mark_reviewed(arrival_id, note, at, by or _who())
            except NotReviewable as exc:
                raise click.BadParameter(str(exc), param_hint="ARRIVAL_ID") from exc
        return f"arrival {m.arrival_id} ({m.kind}) marked reviewed at {m.marked_at}: {m.note}"

    click.echo(run_async(go))
