"""The `edge-agent ledger` click group and its commands registered (each in a module of its own)."""

from __future__ import annotations

import click

from agent.cli.ledger.context import LEDGER_EXIT_HELP, LedgerContext, require_extra
from agent.cli.ledger.demo import demo_cmd
from agent.cli.ledger.intake import import_cmd, run_cmd
from agent.cli.ledger.notifications import notifications_group
from agent.cli.ledger.prune import archive_group, prune_cmd
from agent.cli.ledger.report import report_cmd
from agent.cli.ledger.schema import check_cmd, migrate_cmd
from agent.cli.ledger.web import review_group, web_cmd

COMMANDS = (
    migrate_cmd,
    check_cmd,
    import_cmd,
    run_cmd,
    demo_cmd,
    notifications_group,
    report_cmd,
    prune_cmd,
    archive_group,
)
COMMANDS_WEB = (web_cmd, review_group)  # the review page and the marks it shares with the CLI


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
    require_extra()
    ctx.obj = LedgerContext(dsn)


for _command in (*COMMANDS, *COMMANDS_WEB):
    ledger_group.add_command(_command)
