"""`edge-agent ledger migrate` and `edge-agent ledger check`: the schema's version."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from agent.cli.context import EX_UNAVAILABLE
from agent.cli.ledger.context import LedgerContext, run_ledger


@click.command("migrate")
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
        from agent.ledger import time_partitions
        from agent.ledger.connection import connect

        c = await connect(obj.dsn)
        try:
            applied = await migrations.migrate(c)
            await time_partitions.ensure(c, None)  # the period the ledger's partitions have
            return applied
        finally:
            await c.close()

    applied = run_ledger(go)
    total = len(migrations.migrations())
    if applied:
        click.echo(f"ledger schema migrated to version {total} (applied {', '.join(map(str, applied))})")
    else:
        click.echo(f"ledger schema is at version {total}; nothing to do")


@click.command("check")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: schema version, server, replication.")
@click.option(
    "--require-sync-standby",
    is_flag=True,
    help="Exit 69 unless a synchronous standby streams (what `require_sync_standby: true` needs).",
)
@click.pass_obj
def check_cmd(obj: LedgerContext, as_json: bool, require_sync_standby: bool) -> None:
    """Exit 0 when the schema is this program's latest; 74 while a migration is pending (or newer).
    Also says which server the DSN reached and its replication state (synchronous_standby_names,
    synchronous_commit, the standbys in pg_stat_replication): ledger.md section 7.

    \b
      edge-agent ledger check || edge-agent ledger migrate
      edge-agent ledger check --require-sync-standby   # before a rollout with require_sync_standby

    And the retention state (ledger.md, "Retention and the identity horizon"): the last prune and
    its outcome, rows archived and pruned per table, the oldest row kept per table, the identities
    kept, the `beyond_horizon` arrivals, each table's size.

    Exit 0 up to date, 69 PostgreSQL unreachable (or, with --require-sync-standby, no synchronous
    standby streaming: a ledger with `require_sync_standby: true` would acknowledge nothing),
    74 a migration is pending or the schema is newer.
    """
    from agent.ledger import failover, migrations, retention_state
    from agent.ledger.writer import conn_info

    async def go() -> tuple[str, failover.ReplicationState, dict[str, Any]]:
        conn = await obj.open(migrate=False)
        try:
            return conn_info(conn), await failover.replication_state(conn), await retention_state.read(conn)
        finally:
            await conn.close()

    server, state, retention = run_ledger(go)
    version = len(migrations.migrations())
    if as_json:
        doc = {
            "schema_version": version,
            "server": server,
            "replication": state.as_json(),
            "retention": retention,
        }
        click.echo(json.dumps(doc, default=str))
    else:
        click.echo(f"ledger schema is at version {version}")
        click.echo(f"replication on {server}: {state.describe()}")
        for line in retention_state.describe(retention):
            click.echo(line)
    if require_sync_standby and not state.sync_ok:
        click.echo(
            f"edge-agent ledger: {server} has no synchronous standby streaming; with require_sync_standby"
            " the ledger would acknowledge nothing (grant pg_monitor to the ledger's role if standbys are"
            " listed as async)",
            err=True,
        )
        sys.exit(EX_UNAVAILABLE)
