"""`edge-agent ledger notifications` (the outbox's listing) and its `retry`."""

from __future__ import annotations

import json
from typing import Any

import click

from agent.cli.ledger.context import LedgerContext, run_ledger


@click.group("notifications", invoke_without_command=True)
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
        from agent.cli.ledger.tables import notification_lines

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
