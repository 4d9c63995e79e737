"""`edge-agent prune [--dry-run]`: retention now, or what it would do and why.

Horizons come from the config's `store.retention` section (when the config
file exists), then from the options; the defaults are in `agent.config.retention`.
`--dry-run` opens only the store's reader; both need an existing store (exit 66). No SQL here.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import UTC, datetime
from typing import Any

import click

from agent.cli import progress
from agent.cli.context import Context, run_async
from agent.config.retention import RetentionSettings, check_order, horizon
from agent.config.store import store_retention
from agent.core.contract import ContractError
from agent.core.errors import ConfigError
from agent.core.timestamps import format_timestamp, parse_timestamp
from agent.core.wording import days_ahead
from agent.store import budget
from agent.store.prune import PruneTotals, prune


def retention_of(obj: Context, overrides: dict[str, str | None]) -> RetentionSettings:
    """store.retention from the config (if the file exists), then the command-line overrides."""
    settings = store_retention(obj.config)
    changes: dict[str, Any] = {k: horizon(v, f"--{k}") for k, v in overrides.items() if v is not None}
    if changes:
        settings = dataclasses.replace(settings, **changes)
        check_order(settings, "options")
    return settings


def _now(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC)
    try:
        return parse_timestamp(text, "--now")
    except ContractError as exc:
        raise click.BadParameter(str(exc), param_hint="--now") from exc


_options = [
    click.option("--dry-run", is_flag=True, help="Only say what would go and why the rest stays."),
    click.option("--json", "as_json", is_flag=True, help="One JSON object instead of text."),
    click.option("--arrivals", metavar="AGE", help="Arrival-log horizon, e.g. 30d (default from config)."),
    click.option("--payloads", metavar="AGE", help="Canonical payload horizon, e.g. 90d."),
    click.option(
        "--keys", metavar="AGE", help="Identity-key horizon, e.g. 400d: longer than any replay delay."
    ),
    click.option("--now", "now_text", metavar="TIME", help="Prune as of this RFC 3339 time (default: now)."),
    click.option(
        "--progress/--no-progress",
        "show_progress",
        default=None,
        help="A progress bar on stderr (default: when stderr is a terminal, and not with --json).",
    ),
]


def _with_options(fn: Any) -> Any:
    for opt in reversed(_options):
        fn = opt(fn)
    return fn


@click.command("prune")
@_with_options
@click.pass_obj
def prune_cmd(
    obj: Context,
    dry_run: bool,
    as_json: bool,
    arrivals: str | None,
    payloads: str | None,
    keys: str | None,
    now_text: str | None,
    show_progress: bool | None,
) -> None:
    """Apply retention now: delivered data past its horizon goes, space is given back.

    \b
    Never pruned, however old: anything not delivered to every upstream
    (pending, dead-lettered, or never routed), identity-incomplete arrivals,
    conflicts awaiting review, rejected input lines, BootObserved records.
    A canonical event's payload goes at the payload horizon; its identity key
    is remembered until the key horizon, so a late re-delivery is still a
    duplicate. See docs/retention.md.
    """
    now = _now(now_text)
    try:
        settings = retention_of(obj, {"arrivals": arrivals, "payloads": payloads, "keys": keys})
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {"now": format_timestamp(now), "dry_run": dry_run}
        if dry_run:
            async with await obj.open_reader() as reader:
                out["stages"] = {k: v.as_dict() for k, v in (await reader.prune_plan(settings, now)).items()}
                facts = await reader.measure(now, obj.max_bytes())
        else:
            bars = StageBars(progress.wanted(show_progress, as_json, sys.stderr))
            async with await obj.open_existing_store() as store:
                try:
                    out["pruned"] = _totals(await prune(store, settings, now, bars))
                finally:
                    bars.finish()
                facts = await budget.measure(store, now, obj.max_bytes())
        out["size"] = dataclasses.asdict(budget.assess(facts, settings.high_water, settings.payloads.days))
        return out

    out = run_async(go)
    if as_json:
        click.echo(json.dumps(out))
        return
    _print(out)


class StageBars:
    """One progress bar per prune stage, on stderr; the callback `prune` is given."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: progress.Progress | None = None
        self.stage = ""

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if stage != self.stage or self.bar is None:
            self.finish()
            self.stage = stage
            self.bar = progress.Progress(f"prune {stage}", total, True, sys.stderr, unit="ids")
        self.bar(done, done)

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.finish()
            self.bar = None


def _totals(t: PruneTotals) -> dict[str, Any]:
    return {
        "arrivals": t.arrivals,
        "payloads": t.payloads,
        "outbox_rows": t.outbox_rows,
        "keys_forgotten": t.keys_forgotten,
        "pages_freed": t.pages_freed,
        "batches": t.batches,
        "longest_batch_ms": round(t.longest_batch_s * 1000, 1),
    }


def _print(out: dict[str, Any]) -> None:
    if out["dry_run"]:
        click.echo(f"dry run as of {out['now']} (nothing was changed):")
        for name, st in out["stages"].items():
            click.echo(
                f"  {name}: {st['goes']} would go (older than {st['cutoff']}, horizon {st['horizon']})"
            )
            for reason, n in sorted(st["kept"].items(), key=lambda kv: -kv[1]):
                click.echo(f"    {n} kept though old: {reason}")
    else:
        p = out["pruned"]
        click.echo(
            f"pruned as of {out['now']}: {p['arrivals']} arrivals, {p['payloads']} canonical payloads "
            f"({p['outbox_rows']} delivered outbox rows), {p['keys_forgotten']} identity keys forgotten; "
            f"{p['pages_freed']} pages given back; {p['batches']} batches, longest {p['longest_batch_ms']} ms"
        )
    s = out["size"]
    fit = "unknown (no recent arrivals)" if s["days_that_fit"] is None else days_ahead(s["days_that_fit"])
    click.echo(
        f"store: {s['store_bytes']} bytes used of a {s['budget_bytes']} byte budget ({s['used_share']:.1%}); "
        f"filesystem free {s['fs_free_bytes']} bytes; days of history that fit at the current rate: {fit}"
    )
    if s["warning"]:
        click.echo(f"warning: {s['warning']}", err=True)
