"""`edge-agent demo` and `edge-agent simulate`: the commands that reach the PLC simulators.

The simulators (`devices/`) and the demo scenario are imported only when one of these runs,
so the rest of the command line starts without them.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from agent.cli.context import run_async
from agent.cli.records import print_tables
from agent.store.reader import Reader


@click.command(
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


@click.command("demo")
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
    from agent.cli import (
        demo_scenario,  # the simulators are an independent peer; only these commands reach them
    )

    t0 = time.monotonic()

    def say(text: str) -> None:
        click.echo(f"[{time.monotonic() - t0:5.1f}s] {text}")

    async def go() -> dict[str, Any]:
        result = await demo_scenario.run_demo(say, keep)
        async with await Reader.open(result["store"]) as reader:
            click.echo("")
            await print_tables(reader, "generation", 40)
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
