"""The `edge-agent` command line: the click group, its options, and every command registered.

Only the group lives here; each command group is a module of its own (records, outbox, prune,
service, check, certs, demo), and what they share is `agent.cli.context` (exit codes there).
Every command runs inside one guard: output into a closed pipe ends it quietly with exit 141.
"""

from __future__ import annotations

from typing import Any

import click

from agent import __version__
from agent.cli.certs import certs
from agent.cli.check import check
from agent.cli.context import EXIT_CODES_HELP, Context, quiet_on_closed_stdout
from agent.cli.demo import demo_cmd, simulate_cmd
from agent.cli.ledger.group import ledger_group
from agent.cli.outbox import outbox_cmd, replay_cmd
from agent.cli.prune import prune_cmd
from agent.cli.records import boots_cmd, import_cmd, pending_cmd, report_cmd
from agent.cli.reload import reload_cmd
from agent.cli.review import review_cmd
from agent.cli.service import run_cmd, status_cmd
from agent.config.store import DEFAULT_CONFIG
from agent.config.units import parse_size
from agent.core.errors import ConfigError

COMMANDS = (
    import_cmd,
    report_cmd,
    pending_cmd,
    boots_cmd,
    review_cmd,
    outbox_cmd,
    replay_cmd,
    prune_cmd,
    run_cmd,
    status_cmd,
    reload_cmd,
    check,
    certs,
    demo_cmd,
    simulate_cmd,
    ledger_group,
)


class EdgeAgentGroup(click.Group):
    """The click group, with every command (and every --help) run inside `quiet_on_closed_stdout`,
    before click's own closed-pipe handling would exit 1."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        with quiet_on_closed_stdout():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with quiet_on_closed_stdout():
            return super().invoke(ctx)


@click.group(
    cls=EdgeAgentGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES_HELP,
)
@click.option(
    "--db",
    metavar="PATH",
    envvar="EDGE_AGENT_DB",
    help="SQLite store to use (import and run create it if missing; the others need it). "
    "Wins over the store path in the config.",
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


for command in COMMANDS:
    cli.add_command(command)


def main() -> None:
    cli(prog_name="edge-agent")


if __name__ == "__main__":
    main()
