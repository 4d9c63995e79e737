"""`edge-agent demo` and `edge-agent simulate`: the commands that reach the PLC simulators.

The simulators' protocol stacks (`devices/`) and the demo scenario are imported only when one
of these runs, so the rest of the command line starts without them.
"""

from __future__ import annotations

import time
from typing import Any

import click

import devices.cli  # only click: the simulators' protocol stacks load when `simulate` runs
from agent.cli.context import run_async
from agent.cli.records import print_tables
from agent.core.wording import counted
from agent.store.reader import Reader

simulate_cmd: click.Command = devices.cli.simulate
"""`edge-agent simulate` is the simulator's own click command: its help and options are theirs."""


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
        f"upstream (embedded HTTP receiver): {counted(up['events'], 'event')} received in"
        f" {counted(up['requests'], 'request')}, {counted(up['distinct'], 'distinct id')},"
        f" {counted(up['redeliveries'], 'redelivery', 'redeliveries')} (at least once, stable ids)"
    )
    click.echo(f"demo finished in {result['seconds']} s. The store: {result['store']}")
    click.echo(f"  try: edge-agent --db {result['store']} report --sort state")
