"""`edge-agent import`, `report`, `pending` and `boots`: putting records in, and reading them back.

`import` hands each parsed batch to the store's writer; the other commands open only the
store's reader, so they never create, migrate or lock a store. Nothing here touches SQL.
"""

from __future__ import annotations

import asyncio
import csv
import gc
import json
import sys
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import click

from agent.cli import progress, render
from agent.cli.context import EX_FAILURE, Context, run_async
from agent.core.decide import Outcome
from agent.core.spreadsheet import safe_row
from agent.core.wording import counted
from agent.sources.importer import ImportBatch
from agent.sources.parse_ahead import ParsedAhead, ParseProcessError
from agent.store import report
from agent.store.reader import Reader
from agent.store.store import Store

IMPORT_SWITCH_INTERVAL_S = 0.001  # see import_into
IMPORT_GC_THRESHOLD = 10_000  # see import_into
# SQLite's page cache while a file is imported (its default is 2,000 KiB). A file whose
# re-deliveries reach anywhere into the history looks up, updates the counts of and indexes
# arrivals against canonical events all over the store: with the default cache most of those
# pages were read again from the WAL or the file in every batch (docs/performance.md).
IMPORT_PAGE_CACHE_KIB = 32 * 1024


class ImportTally:
    """Decisions counted over an import, and the first rejected lines with their reasons."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.rejected: list[tuple[int, str]] = []

    def add(self, lines: list[int], outcomes: list[Outcome]) -> None:
        for line, oc in zip(lines, outcomes, strict=True):
            d = oc.decision._value_
            self.counts[d] = self.counts.get(d, 0) + 1
            if d == "rejected" and len(self.rejected) < 20:
                self.rejected.append((line, oc.reason or ""))

    def lines(self, file: str) -> list[str]:
        total = sum(self.counts.values())
        parts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        out = [f"imported {total} lines from {file}: {parts or 'nothing'}"]
        out += [f"  line {line}: rejected: {reason}" for line, reason in self.rejected]
        more = self.counts.get("rejected", 0) - len(self.rejected)
        if more > 0:
            out.append(f"  ... and {more} more rejected lines (see `report`)")
        return out


def _json_results(lines: list[int], outcomes: list[Outcome]) -> str:
    """One JSON object per line, exactly as `json.dumps` writes it (the common fields are
    plain numbers and fixed words, so they are formatted directly)."""
    dumps = json.dumps
    return "".join(
        f'{{"line": {line}, "decision": "{oc.decision._value_}",'
        f' "canonical_id": {"null" if (c := oc.canonical_id) is None else int(c)},'
        f' "duplicate_of": {"null" if (d := oc.duplicate_of) is None else int(d)},'
        f' "reason": {"null" if oc.reason is None else dumps(oc.reason)},'
        f' "flags": {dumps(list(oc.flags)) if oc.flags else "[]"}}}\n'
        for line, oc in zip(lines, outcomes, strict=True)
    )


async def import_into(
    store: Store, file: str, receiver: str | None, as_json: bool, tally: ImportTally, bar: progress.Progress
) -> None:
    """Record the file batch by batch; a batch's results are printed only after its commit, while
    the next batch is taken (in a worker thread).

    From the second batch on, a file larger than about a megabyte is parsed by a second process
    (`agent.sources.parse_ahead`), a batch or two ahead, while this one records: on the second
    core, without this process's interpreter lock. Here, a batch is taken (received from that
    process and rebuilt, or parsed here) only once the batch before it is committed, not while
    it is recorded: that work and the record's own Python work both hold the interpreter lock,
    and overlapping them made the store's thread wait for the lock at each of its statements (an
    import took 3-5 % more wall time and more CPU than with the two one after the other, 9
    alternated rounds, when the parse ran here in a thread).

    While the parser holds the interpreter lock, the store's thread waits for the lock to change
    hands: at Python's default switch interval (5 ms) 800 such calls beside a busy thread took
    0.9 s, at 1 ms 0.05 s. So the interval is 1 ms while the file is imported.

    A batch holds a few thousand container objects (deliveries, rows, outcomes) that live until
    it is recorded and then go by reference counting. At Python's default threshold (700 more
    allocations than deallocations) that churn made about 850 cyclic collections per 100,000
    lines, several of them full ones: 8-12 % of the import's CPU, found nothing to free. While
    the file is imported a young-generation collection waits for 10,000 (about 5 collections
    per 100,000 lines); garbage in cycles, if any, is still collected, 10,000 objects at most later."""
    batches = ParsedAhead(file, receiver=receiver)
    loop = asyncio.get_running_loop()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(IMPORT_SWITCH_INTERVAL_S)
    thresholds = gc.get_threshold()
    gc.set_threshold(IMPORT_GC_THRESHOLD, *thresholds[1:])

    def report(batch: ImportBatch, outcomes: list[Outcome]) -> None:
        if as_json:
            sys.stdout.write(_json_results(batch.lines, outcomes))
            sys.stdout.flush()
        tally.add(batch.lines, outcomes)
        bar(batch.bytes_read, batch.lines[-1])

    parsing: asyncio.Future[ImportBatch | None] | None = None
    try:
        batch = await loop.run_in_executor(None, next, batches, None)
        while batch is not None:
            outcomes = await store.record(batch.items)
            # Committed: printed while the next batch is parsed.
            parsing = loop.run_in_executor(None, next, batches, None)
            report(batch, outcomes)
            batch = await parsing
    finally:
        if parsing is not None:
            parsing.cancel()  # printing failed (a closed stdout): its result is not wanted
        batches.close()
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON result per non-blank line, printed after commit."
)
@click.option(
    "--progress/--no-progress",
    "show_progress",
    default=None,
    help="A progress bar on stderr (default: when stderr is a terminal, and not with --json).",
)
@click.option(
    "--receiver", metavar="NAME", help="Receiver recorded as evidence (default: import:<file name>)."
)
@click.pass_obj
def import_cmd(
    obj: Context, file: str, as_json: bool, show_progress: bool | None, receiver: str | None
) -> None:
    """Ingest FILE (JSON Lines, one delivery per line) into the store.

    \b
    Each line: {"source": "PUMP-07/Trip", "transitionId": "T91", "bootId": "B17",
                "sourceTimestamp": "2026-04-22T08:00:12.120Z",
                "arrivalAt": "2026-04-22T08:00:12.180Z", "payload": {"state": "Trip"}}

    Every line is kept: unparseable lines are `rejected` with their line
    number and raw text, and the rest of the file goes on. With --json, one
    object per line {"line", "decision", "canonical_id", "duplicate_of",
    "reason", "flags"} is printed only after that line is committed. Exits 0
    when every line was stored, 74 when the store could not be written.
    """
    show = progress.wanted(show_progress, as_json, sys.stderr)
    bar = progress.Progress("import", Path(file).stat().st_size, show, sys.stderr)
    tally = ImportTally()

    async def go() -> None:
        store = await obj.open_store()
        try:
            await store.set_page_cache(IMPORT_PAGE_CACHE_KIB)
            await import_into(store, file, receiver, as_json, tally, bar)
        finally:
            bar.finish()
            await store.close()

    try:
        run_async(go)
    except ParseProcessError as exc:
        click.echo(f"edge-agent: {exc}; every line before it is committed", err=True)
        sys.exit(EX_FAILURE)
    if not as_json:
        for line in tally.lines(file):
            click.echo(line)


async def _collect(it: AsyncGenerator[dict[str, Any]], limit: int | None = None) -> list[dict[str, Any]]:
    """Up to `limit` rows; the stream is closed before this returns (no cursor left open)."""
    out = []
    async with aclosing(it) as rows:
        async for row in rows:
            out.append(row)
            if limit is not None and len(out) >= limit:
                break
    return out


async def _write_json_report(reader: Reader, sort: str) -> None:
    """Stream the report as one JSON object, section by section (memory stays flat)."""
    w = sys.stdout.write
    w('{"summary": ' + json.dumps(await reader.summary()))
    sections: list[tuple[str, Callable[[], AsyncGenerator[dict[str, Any]]]]] = [
        ("events", lambda: reader.events(sort)),
        ("arrivals", reader.arrivals),
        ("boots", reader.boots),
        ("gaps", lambda: reader.anomalies(gaps=True)),
        ("anomalies", lambda: reader.anomalies(gaps=False)),
        ("pending", reader.pending),
    ]
    for name, open_rows in sections:
        w(f', "{name}": [')
        first = True
        async with aclosing(open_rows()) as rows:
            async for row in rows:
                w(("" if first else ", ") + json.dumps(row, ensure_ascii=False))
                first = False
        w("]")
    w("}\n")


async def _write_csv(reader: Reader, sort: str) -> None:
    writer = csv.writer(sys.stdout)
    cols = render.EVENT_COLUMNS
    writer.writerow([f for _, f in cols])
    async with aclosing(reader.events(sort)) as events:
        async for ev in events:
            writer.writerow(safe_row([render.cell(ev[f]) if f == "payload" else ev[f] for _, f in cols]))


@click.command("report")
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object: summary, events, arrivals, boots, ..."
)
@click.option("--csv", "as_csv", is_flag=True, help="Canonical events as CSV (one row per event).")
@click.option(
    "--sort",
    type=click.Choice(sorted(report.SORTS)),
    default="arrival",
    show_default=True,
    help="Order of events: by first arrival, state (conflicts first), generation (device, bootId), "
    "source, id.",
)
@click.option("--limit", type=int, default=100, show_default=True, help="Rows per table for people (0: all).")
@click.pass_obj
def report_cmd(obj: Context, as_json: bool, as_csv: bool, sort: str, limit: int) -> None:
    """Show what the store holds: counts, canonical events, boots, gaps, pending.

    Source events, arrivals and delivery attempts are always counted apart.
    """
    if as_json and as_csv:
        raise click.UsageError("choose one of --json and --csv")

    async def go() -> None:
        async with await obj.open_reader() as reader:
            if as_json:
                await _write_json_report(reader, sort)
            elif as_csv:
                await _write_csv(reader, sort)
            else:
                await print_tables(reader, sort, limit or None)

    run_async(go)


def _echo_table(title: str, rows: list[dict[str, Any]], columns: tuple[tuple[str, str], ...]) -> None:
    click.echo(title)
    for line in render.table(render.headers_of(columns), render.rows_of(rows, columns)):
        click.echo(line)


async def print_tables(reader: Reader, sort: str, limit: int | None) -> None:
    """The report for people: summary, canonical events, boots, gaps, anomalies, hints."""
    summary = await reader.summary()
    click.echo(f"store: {reader.path}")
    for line in render.summary_lines(summary):
        click.echo(line)
    click.echo("")
    evs = await _collect(reader.events(sort), limit)
    _echo_table(f"canonical events (sorted by {sort}):", evs, render.EVENT_COLUMNS)
    if evs:
        for line in render.wrapped("note", render.REPEATS_NOTE, indent=0):
            click.echo(line)
    if limit is not None and summary["source_events"] > len(evs):
        click.echo(f"... {summary['source_events'] - len(evs)} more (use --limit 0 or --json)")
    bts = await _collect(reader.boots(), limit)
    if bts:
        _echo_table("\nboots observed:", bts, render.BOOT_COLUMNS)
    for title, gaps in (("gaps", True), ("anomalies", False)):
        recs = await _collect(reader.anomalies(gaps=gaps), limit)
        if recs:
            _echo_table(f"\n{title}:", recs, render.ANOMALY_COLUMNS)
    if summary["conflicts"]:
        n = counted(summary["conflicts"], "conflict")
        click.echo(f"\n{n}: `edge-agent review conflicts` shows both payloads side by side.")
    if summary["identity_incomplete"]:
        n = counted(summary["identity_incomplete"], "identity-incomplete arrival")
        click.echo(f"\n{n} waiting for a person: `edge-agent review pending` shows their raw evidence.")
    if summary["rejected"]:
        click.echo(
            f"{summary['rejected']} rejected lines: `edge-agent report --json` lists them with reasons."
        )


def _list_records(
    obj: Context,
    as_json: bool,
    rows_of: Callable[[Reader], AsyncGenerator[dict[str, Any]]],
    columns: tuple[tuple[str, str], ...],
    empty: str,
    width: int = 48,
) -> None:
    """One record per line as JSON, or a table for people."""

    async def go() -> list[dict[str, Any]]:
        async with await obj.open_reader() as reader:
            return await _collect(rows_of(reader))

    rows = run_async(go)
    if as_json:
        for r in rows:
            click.echo(json.dumps(r, ensure_ascii=False))
    elif not rows:
        click.echo(empty)
    else:
        for line in render.table(render.headers_of(columns), render.rows_of(rows, columns), width):
            click.echo(line)


@click.command("pending")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def pending_cmd(obj: Context, as_json: bool) -> None:
    """List identity-incomplete arrivals (no source, transitionId or bootId).

    They are kept, never merged with anything, and no boot id is made up for
    them; they wait here for a person.
    """
    _list_records(
        obj, as_json, lambda r: r.pending(), render.ARRIVAL_COLUMNS, "no identity-incomplete arrivals"
    )


@click.command("boots")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def boots_cmd(obj: Context, as_json: bool) -> None:
    """List BootObserved records: each controller generation, its predecessor and the evidence."""
    _list_records(obj, as_json, lambda r: r.boots(), render.BOOT_COLUMNS, "no boots observed", 80)
