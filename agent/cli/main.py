"""The `edge-agent` command line. Thin: parses options, calls the store, prints.

The only module that prints for people. Exit codes: 0 ok, 1 usage/unexpected,
2 click usage errors, 74 store I/O error (disk full, unwritable, damaged),
78 configuration error (the systemd unit does not restart on 78).
"""

from __future__ import annotations

import csv
import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import click

from agent import __version__
from agent.cli import render
from agent.cli.common import EX_CONFIG, EX_IOERR, Context, run_async  # noqa: F401
from agent.config.store import DEFAULT_CONFIG
from agent.config.units import parse_size
from agent.core.errors import ConfigError
from agent.sources.importer import import_file
from agent.store import report
from agent.store.store import Store


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--db",
    metavar="PATH",
    envvar="EDGE_AGENT_DB",
    help="SQLite store to use (created if missing). Wins over the store path in the config.",
)
@click.option(
    "-c",
    "--config",
    metavar="FILE",
    default=DEFAULT_CONFIG,
    show_default=True,
    envvar="EDGE_AGENT_CONFIG",
    help="Gateway configuration (YAML); its store.path is used when --db is not given.",
)
@click.option(
    "--max-db-size",
    metavar="SIZE",
    help="Size quota for the store, e.g. 512MB or 2GB. When reached, writes fail loudly; "
    "nothing committed is lost.",
)
@click.option(
    "--synchronous",
    type=click.Choice(["FULL", "EXTRA", "NORMAL"], case_sensitive=False),
    help="SQLite durability. FULL (default) survives power loss; NORMAL may lose the last commits.",
)
@click.version_option(__version__, prog_name="edge-agent")
@click.pass_context
def cli(
    ctx: click.Context, db: str | None, config: str, max_db_size: str | None, synchronous: str | None
) -> None:
    """edge-agent: records every controller event once, keyed by (source, transitionId, bootId).

    \b
    Quick start:
      edge-agent --db events.db import capture.jsonl      # ingest an offline capture
      edge-agent --db events.db report                    # canonical events, boots, pending
      edge-agent --db events.db report --json             # the same, for programs

    Arrival time is evidence, never identity: a repeat of a key is a duplicate,
    the same key with other content is a conflict (both kept), and a delivery
    without a bootId stays identity_incomplete; no boot id is ever made up.
    """
    if max_db_size is not None:
        try:
            parse_size(max_db_size)
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--max-db-size") from exc
    ctx.obj = Context(db, config, max_db_size, synchronous)


# --- import --------------------------------------------------------------------


class Progress:
    """A progress line on stderr for imports that take more than a moment (never on stdout)."""

    def __init__(self, total_bytes: int, enabled: bool) -> None:
        self.total = max(total_bytes, 1)
        self.enabled = enabled
        self.start = time.monotonic()
        self.shown = False

    def __call__(self, done_bytes: int, lines: int) -> None:
        elapsed = time.monotonic() - self.start
        if not self.enabled or elapsed < 1.0:
            return
        rate = lines / elapsed if elapsed > 0 else 0.0
        pct = 100.0 * done_bytes / self.total
        click.echo(f"\rimport: {pct:5.1f}%  {lines} lines  {rate:,.0f} lines/s ", err=True, nl=False)
        self.shown = True

    def finish(self) -> None:
        if self.shown:
            click.echo("", err=True)


@cli.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON result per non-blank line, printed after commit."
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress on stderr (default: when stderr is a terminal).",
)
@click.option(
    "--receiver", metavar="NAME", help="Receiver recorded as evidence (default: import:<file name>)."
)
@click.pass_obj
def import_cmd(obj: Context, file: str, as_json: bool, progress: bool | None, receiver: str | None) -> None:
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
    show = sys.stderr.isatty() if progress is None else progress
    bar = Progress(Path(file).stat().st_size, show)
    counts: dict[str, int] = {}
    rejected: list[tuple[int, str]] = []

    async def go() -> None:
        store = await obj.open_store()
        try:
            async for results in import_file(store, file, receiver=receiver, on_progress=bar):
                if as_json:
                    out = "".join(
                        json.dumps(
                            {
                                "line": r.line,
                                "decision": r.outcome.decision.value,
                                "canonical_id": r.outcome.canonical_id,
                                "duplicate_of": r.outcome.duplicate_of,
                                "reason": r.outcome.reason,
                                "flags": list(r.outcome.flags),
                            }
                        )
                        + "\n"
                        for r in results
                    )
                    sys.stdout.write(out)
                    sys.stdout.flush()
                for r in results:
                    d = r.outcome.decision.value
                    counts[d] = counts.get(d, 0) + 1
                    if d == "rejected" and len(rejected) < 20:
                        rejected.append((r.line, r.outcome.reason or ""))
        finally:
            bar.finish()
            await store.close()

    run_async(go)
    if not as_json:
        total = sum(counts.values())
        parts = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        click.echo(f"imported {total} lines from {file}: {parts or 'nothing'}")
        for line, reason in rejected:
            click.echo(f"  line {line}: rejected: {reason}")
        if counts.get("rejected", 0) > len(rejected):
            click.echo(f"  ... and {counts['rejected'] - len(rejected)} more rejected lines (see `report`)")


# --- report ----------------------------------------------------------------------


async def _collect(it: AsyncIterator[dict[str, Any]], limit: int | None = None) -> list[dict[str, Any]]:
    out = []
    async for row in it:
        out.append(row)
        if limit is not None and len(out) >= limit:
            break
    return out


async def _write_json_report(store: Store, sort: str) -> None:
    """Stream the report as one JSON object, section by section (memory stays flat)."""
    w = sys.stdout.write
    w('{"summary": ' + json.dumps(await report.summary(store.db)))
    sections: list[tuple[str, AsyncIterator[dict[str, Any]]]] = [
        ("events", report.events(store.db, sort)),
        ("arrivals", report.arrivals(store.db)),
        ("boots", report.boots(store.db)),
        ("gaps", report.anomalies(store.db, gaps=True)),
        ("anomalies", report.anomalies(store.db, gaps=False)),
        ("pending", report.pending(store.db)),
    ]
    for name, rows in sections:
        w(f', "{name}": [')
        first = True
        async for row in rows:
            w(("" if first else ", ") + json.dumps(row, ensure_ascii=False))
            first = False
        w("]")
    w("}\n")


@cli.command("report")
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
        store = await obj.open_store()
        try:
            if as_json:
                await _write_json_report(store, sort)
            elif as_csv:
                writer = csv.writer(sys.stdout)
                cols = render.EVENT_COLUMNS
                writer.writerow([f for _, f in cols])
                async for ev in report.events(store.db, sort):
                    writer.writerow([render.cell(ev[f]) if f == "payload" else ev[f] for _, f in cols])
            else:
                await _print_tables(store, sort, limit or None)
        finally:
            await store.close()

    run_async(go)


async def _print_tables(store: Store, sort: str, limit: int | None) -> None:
    summary = await report.summary(store.db)
    click.echo(f"store: {store.path}")
    for line in render.summary_lines(summary):
        click.echo(line)
    click.echo("")
    click.echo(f"canonical events (sorted by {sort}):")
    evs = await _collect(report.events(store.db, sort), limit)
    for line in render.table(
        render.headers_of(render.EVENT_COLUMNS), render.rows_of(evs, render.EVENT_COLUMNS)
    ):
        click.echo(line)
    if limit is not None and summary["source_events"] > len(evs):
        click.echo(f"... {summary['source_events'] - len(evs)} more (use --limit 0 or --json)")
    bts = await _collect(report.boots(store.db), limit)
    if bts:
        click.echo("\nboots observed:")
        for line in render.table(
            render.headers_of(render.BOOT_COLUMNS), render.rows_of(bts, render.BOOT_COLUMNS)
        ):
            click.echo(line)
    for title, gaps in (("gaps", True), ("anomalies", False)):
        recs = await _collect(report.anomalies(store.db, gaps=gaps), limit)
        if recs:
            click.echo(f"\n{title}:")
            for line in render.table(
                render.headers_of(render.ANOMALY_COLUMNS), render.rows_of(recs, render.ANOMALY_COLUMNS)
            ):
                click.echo(line)
    if summary["identity_incomplete"]:
        click.echo(
            f"\n{summary['identity_incomplete']} identity-incomplete arrivals wait in `edge-agent pending`."
        )
    if summary["rejected"]:
        click.echo(
            f"{summary['rejected']} rejected lines: `edge-agent report --json` lists them with reasons."
        )


def _list_records(
    obj: Context,
    as_json: bool,
    rows_of: Callable[[Store], AsyncIterator[dict[str, Any]]],
    columns: tuple[tuple[str, str], ...],
    empty: str,
    width: int = 48,
) -> None:
    """One record per line as JSON, or a table for people."""

    async def go() -> list[dict[str, Any]]:
        store = await obj.open_store()
        try:
            return await _collect(rows_of(store))
        finally:
            await store.close()

    rows = run_async(go)
    if as_json:
        for r in rows:
            click.echo(json.dumps(r, ensure_ascii=False))
    elif not rows:
        click.echo(empty)
    else:
        for line in render.table(render.headers_of(columns), render.rows_of(rows, columns), width):
            click.echo(line)


@cli.command("pending")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def pending_cmd(obj: Context, as_json: bool) -> None:
    """List identity-incomplete arrivals (no source, transitionId or bootId).

    They are kept, never merged with anything, and no boot id is made up for
    them; they wait here for a person.
    """
    _list_records(
        obj,
        as_json,
        lambda s: report.pending(s.db),
        render.ARRIVAL_COLUMNS,
        "no identity-incomplete arrivals",
    )


@cli.command("boots")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def boots_cmd(obj: Context, as_json: bool) -> None:
    """List BootObserved records: each controller generation, its predecessor and the evidence."""
    _list_records(obj, as_json, lambda s: report.boots(s.db), render.BOOT_COLUMNS, "no boots observed", 80)


@cli.command(
    "simulate",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def simulate_cmd(args: tuple[str, ...]) -> None:
    """Run simulated PLCs (Modbus TCP + OPC UA) to try a config against; `simulate --help` for options.

    The same as `python -m devices ...`: prints the endpoints, the register
    map and the agent config snippet for the simulated controllers, and runs
    until Ctrl-C or SIGTERM.
    """
    import devices  # the simulators are an independent peer; only the CLI reaches them

    sys.exit(devices.cli_main(list(args)))


@cli.command("demo")
@click.option(
    "--keep", metavar="DIR", help="Put the store and config here (default: a new temporary directory)."
)
def demo_cmd(keep: str | None) -> None:
    """Show the whole mission in under a minute, with no outside services.

    Starts simulated PLCs (Modbus TCP and OPC UA, one PLC over both, one
    without a boot id), the agent with a temporary store and an embedded HTTP
    upstream. During the run a controller restarts, the upstream goes away and
    comes back, and a link cut makes the agent replay a ring buffer. Then it
    prints the report and where the store is, so you can run `report`,
    `boots`, `pending` and `outbox` on it yourself.
    """
    from agent.cli import demo  # the simulators are an independent peer; only these commands reach them

    t0 = time.monotonic()

    def say(text: str) -> None:
        click.echo(f"[{time.monotonic() - t0:5.1f}s] {text}")

    async def go() -> dict[str, Any]:
        result = await demo.run_demo(say, keep)
        store = await Store.open(result["store"])
        try:
            click.echo("")
            await _print_tables(store, "generation", 40)
        finally:
            await store.close()
        return result

    result = run_async(go)
    up = result["upstream"]
    click.echo("")
    click.echo(
        f"upstream (embedded HTTP receiver): {up['events']} events received in {up['requests']} requests,"
        f" {up['distinct']} distinct ids, {up['redeliveries']} redeliveries (at least once, stable ids)"
    )
    click.echo(f"demo finished in {result['seconds']} s. The store: {result['store']}")
    click.echo(f"  try: edge-agent --db {result['store']} report --sort state")


def main() -> None:
    cli(prog_name="edge-agent")


from agent.cli.prune import prune_cmd  # noqa: E402  (retention)

cli.add_command(prune_cmd)

from agent.cli.outbox import outbox_cmd, replay_cmd  # noqa: E402  (registration of the delivery commands)

cli.add_command(outbox_cmd)
cli.add_command(replay_cmd)

from agent.cli.check import check  # noqa: E402  (configuration check and device probe)

cli.add_command(check)

from agent.cli.service import run_cmd, status_cmd  # noqa: E402  (the service)

cli.add_command(run_cmd)
cli.add_command(status_cmd)

from agent.cli.certs import certs  # noqa: E402  (OPC UA client certificate)

cli.add_command(certs)


if __name__ == "__main__":
    main()
