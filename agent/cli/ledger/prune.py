"""`edge-agent ledger prune [--dry-run]` and `edge-agent ledger archive verify FILE|DIR`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agent.cli.context import EX_CONFIG, EX_IOERR
from agent.cli.ledger.context import LedgerContext, run_ledger
from agent.core.errors import ConfigError

if TYPE_CHECKING:
    from agent.ledger.config import LedgerConfig
    from agent.ledger.retention_config import RetentionSettings


def span(seconds: float) -> str:
    """90d, 5y, 1h, 30m: the largest whole unit."""
    for unit, size in (("y", 365 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


@click.command("prune")
@click.option(
    "-c",
    "--config",
    "config_path",
    metavar="FILE",
    default="/etc/edge-ledger/ledger.yaml",
    show_default=True,
    help="Ledger configuration: its `retention:` section (periods, identity_horizon, archive_dir).",
)
@click.option(
    "--dry-run", is_flag=True, help="Say per table what would go and why; write and delete nothing."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.pass_obj
def prune_cmd(obj: LedgerContext, config_path: str, dry_run: bool, as_json: bool) -> None:
    """Archive, then delete what is older than its retention period (ledger.md, "Retention").

    Per table: what is older than its period and named by nothing kept is written to
    `archive_dir` (gzip JSON Lines with a manifest each), read back and verified, and only then
    removed: a time partition of arrivals or notifications wholly past its period goes whole
    (one file per partition), other rows in bounded transactions (one file per table and day).
    Canonical payloads are cleared (the compact identity stays until the identity horizon).
    Open conflicts and pending arrivals, dead or unsent notifications and review marks of kept
    items are never pruned.

    \b
      edge-agent ledger prune -c /etc/edge-ledger/ledger.yaml --dry-run
      edge-agent ledger prune -c /etc/edge-ledger/ledger.yaml

    Exit 0 done, 69 PostgreSQL unreachable, 74 the archive could not be written or did not verify
    (nothing of that table deleted; the reason is printed and recorded for `ledger check`) or
    another prune is running, 78 a configuration error or no `retention:` section.
    """
    from agent.ledger import prune

    cfg, settings = _config_with_retention(config_path)

    async def go() -> prune.PruneResult:
        from agent.ledger import migrations
        from agent.ledger.connection import connect

        password = Path(cfg.password_file).read_text().rstrip("\r\n") if cfg.password_file else None
        conn = await connect(obj.dsn or cfg.dsn, password=password)
        try:
            await migrations.check(conn)
            return await prune.prune(conn, settings, dry_run=dry_run)
        finally:
            await conn.close()

    result = run_ledger(go)
    if as_json:
        click.echo(json.dumps(_as_json(result, settings.as_json()), default=str))
        return
    if dry_run:
        click.echo("ledger prune --dry-run: nothing written, nothing deleted")
    else:
        click.echo(f"ledger prune run {result.run_id}: archived to {settings.archive_dir}, then deleted")
    for s in result.steps:
        period = span(float(getattr(settings, f"{s.setting}_s")))
        when = f"older than {s.cutoff:%Y-%m-%d %H:%M}Z ({s.setting}: {period})"
        if dry_run:
            oldest = "" if s.oldest is None else f", oldest {s.oldest:%Y-%m-%d %H:%M}Z"
            click.echo(f"  {s.table:<19} {s.archived} rows would go{oldest}; {when}: {s.why}")
        else:
            click.echo(f"  {s.table:<19} archived {s.archived}, pruned {s.pruned}; {when}")
    for line in partition_lines(result.partitions, dry_run):
        click.echo(line)


def partition_lines(parts: list[Any], dry_run: bool) -> list[str]:
    """The time partitions taken whole (or that would be), each with its range and why."""
    out = []
    if parts:
        head = "would be taken whole" if dry_run else "taken whole"
        out.append(f"  time partitions {head} (a period partition's rows go with it, never row by row):")
    for p in parts:
        lo = "the oldest rows" if p.lower is None else f"{p.lower:%Y-%m-%d %H:%M}Z"
        span_ = (
            f"{lo} .. {p.upper:%Y-%m-%d %H:%M}Z, wholly older than {p.cutoff:%Y-%m-%d %H:%M}Z ({p.setting})"
        )
        end = "dropped" if p.dropped else f"truncated, {p.kept} kept rows stay in it"
        if dry_run:
            out.append(
                f"    {p.partition}: {p.archived} of {p.rows} rows would go, then {end}; {span_}: {p.why}"
            )
        else:
            out.append(f"    {p.partition}: archived {p.archived}, pruned {p.pruned}, {end}; {span_}")
    return out


def _config_with_retention(config_path: str) -> tuple[LedgerConfig, RetentionSettings]:
    """The ledger's configuration; exit 78 with every problem (file:line) or when it has no
    `retention:` section."""
    from agent.ledger import config

    try:
        cfg = config.load(config_path)
    except ConfigError as exc:  # every problem with its file:line, no traceback
        click.echo(f"edge-agent ledger: configuration error: {exc}", err=True)
        sys.exit(EX_CONFIG)
    if cfg.retention is None:
        click.echo(
            f"edge-agent ledger: {config_path} has no `retention:` section: nothing to prune", err=True
        )
        sys.exit(EX_CONFIG)
    return cfg, cfg.retention


def _as_json(result: Any, settings: dict[str, Any]) -> dict[str, Any]:
    return {
        "run": result.run_id,
        "dry_run": result.run_id is None,
        "settings": settings,
        "steps": [
            {
                "table": s.table,
                "setting": s.setting,
                "older_than": s.cutoff.isoformat(),
                "why": s.why,
                "rows": s.archived,
                "archived": s.archived if result.run_id is not None else 0,
                "pruned": s.pruned,
                "oldest": None if s.oldest is None else s.oldest.isoformat(),
                "files": s.files,
            }
            for s in result.steps
        ],
        "partitions": [
            {
                "table": p.table,
                "partition": p.partition,
                "from": None if p.lower is None else p.lower.isoformat(),
                "to": None if p.upper is None else p.upper.isoformat(),
                "setting": p.setting,
                "older_than": p.cutoff.isoformat(),
                "why": p.why,
                "rows": p.rows,
                "kept": p.kept,
                "to_go": p.rows - p.kept,
                "archived": p.archived if result.run_id is not None else 0,
                "pruned": p.pruned,
                "dropped": p.dropped,
                "files": p.files,
            }
            for p in result.partitions
        ],
    }


@click.group("archive")
def archive_group() -> None:
    """The prune's archive files (gzip JSON Lines with a manifest each)."""


@archive_group.command("verify")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
def verify_cmd(path: Path) -> None:
    """Check archive files against their manifests (size, SHA-256, rows, first and last id).

    \b
      edge-agent ledger archive verify /var/lib/edge-ledger/archive
      edge-agent ledger archive verify /var/lib/edge-ledger/archive/arrival/arrival-2026-01-05-run3.jsonl.gz

    Exit 0 every file verifies, 74 one does not (each problem printed), 66 no archive file there.
    """
    from agent.ledger import archive

    files = archive.files_under(path)
    if not files:
        click.echo(f"edge-agent ledger: no archive file (*.jsonl.gz) under {path}", err=True)
        sys.exit(66)
    bad = 0
    for f in files:
        problems = archive.verify(f)
        if problems:
            bad += 1
            for p in problems:
                click.echo(f"{f}: {p}", err=True)
        else:
            manifest = json.loads(f.with_name(f.name + archive.MANIFEST).read_text(encoding="utf-8"))
            click.echo(f"{f}: ok, {manifest['rows']} rows")
    click.echo(f"{len(files) - bad} of {len(files)} archive files verify")
    if bad:
        sys.exit(EX_IOERR)
