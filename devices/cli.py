"""The simulated plant's command line: one click command, ``python -m devices`` and ``edge-agent simulate``.

Only option parsing and help live here, and it imports nothing heavier than click: the protocol
stacks load when the command runs (``devices.standalone``). It must never import ``agent``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

MULTI_VALUE_OPTIONS = frozenset({"--controllers", "--channels"})


def spread_multi_values(args: list[str], options: frozenset[str] = MULTI_VALUE_OPTIONS) -> list[str]:
    """``--controllers A B`` becomes ``--controllers A --controllers B`` (click options take one value).

    Every word after one of ``options`` up to the next word starting with ``-`` is a value of it.
    """
    spread: list[str] = []
    current: str | None = None
    values_taken = 0
    for arg in args:
        if arg.startswith("-"):
            current, values_taken = (arg if arg in options else None), 0
        elif current is not None:
            if values_taken:
                spread.append(current)
            values_taken += 1
        spread.append(arg)
    return spread


class MultiValueCommand(click.Command):
    """A click command whose MULTI_VALUE_OPTIONS take several words, as in ``--channels Trip Overload``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, spread_multi_values(args))


@click.command(
    "simulate",
    cls=MultiValueCommand,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the servers listen on.")
@click.option(
    "--modbus-port",
    type=int,
    default=15020,
    show_default=True,
    help="First Modbus TCP port, one port per controller; 0 picks free ports.",
)
@click.option(
    "--opcua-port", type=int, default=48400, show_default=True, help="OPC UA port; 0 picks a free one."
)
@click.option("--no-modbus", is_flag=True, help="Serve no Modbus TCP (OPC UA only).")
@click.option("--no-opcua", is_flag=True, help="Serve no OPC UA (Modbus TCP only).")
@click.option(
    "--controllers",
    multiple=True,
    default=["PUMP-07"],
    show_default=True,
    metavar="NAME...",
    help="Names of the simulated controllers, e.g. --controllers PUMP-07 FAN-01. Ignored with --scenario.",
)
@click.option(
    "--channels",
    multiple=True,
    default=["Trip"],
    show_default=True,
    metavar="NAME...",
    help="Event channels of every controller, e.g. --channels Trip Overload.",
)
@click.option(
    "--counter-bits",
    type=click.Choice([16, 32]),
    default=32,
    show_default=True,
    help="Width of each channel's transition counter (16 wraps at 65536).",
)
@click.option(
    "--boot-id",
    type=click.Choice(["counter", "random32", "none"]),
    default="counter",
    show_default=True,
    help="How a controller numbers its boots: counting up, random, or no boot id at all.",
)
@click.option(
    "--boot-id-start", type=int, default=17, show_default=True, help="First boot id of a counting controller."
)
@click.option(
    "--ring", type=int, default=8, show_default=True, help="Ring buffer slots (Modbus: at most 10)."
)
@click.option(
    "--word-order",
    type=click.Choice(["big", "little"]),
    default="big",
    show_default=True,
    help="Modbus word order of 32- and 64-bit values.",
)
@click.option(
    "--poll",
    default="250ms",
    show_default=True,
    help="Poll interval written into the printed config snippet.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the random boot ids and transitions."
)
@click.option(
    "--scenario",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML scenario with the controllers and scripted steps (not with --random).",
)
@click.option(
    "--random",
    type=float,
    metavar="RATE",
    help="Random transitions per second, for load (not with --scenario).",
)
@click.option(
    "--commands",
    is_flag=True,
    help="Read scenario steps from stdin, one per line, e.g. {transition: PUMP-07/Trip, state: 1}; "
    "each is answered by one OK or ERR line.",
)
@click.option(
    "--pki",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Directory for test certificates: also offer Basic256Sha256 endpoints, trust store DIR/trusted.",
)
@click.option(
    "--user",
    multiple=True,
    metavar="NAME:PASSWORD",
    help="OPC UA user (repeatable); any --user disables anonymous login.",
)
@click.option("--quiet", is_flag=True, help="Print only the READY line.")
@click.pass_context
def simulate(ctx: click.Context, /, **options: Any) -> None:
    """Run simulated PLCs over Modbus TCP and OPC UA, to try the agent or a config against.

    Prints a READY line with the bound endpoints as JSON, then the endpoints,
    the register map and the agent config snippet (paste its devices: section
    into your config). Runs until Ctrl-C or SIGTERM, or with --commands until
    stdin closes.

    \b
    Examples:
      simulate --modbus-port 0 --opcua-port 0        # free ports, printed
      simulate --controllers PUMP-07 FAN-01 --channels Trip Overload
      simulate --boot-id none --no-opcua             # a controller without boot id
      simulate --random 20                           # 20 transitions per second
    """
    if options["scenario"] is not None and options["random"] is not None:
        raise click.UsageError("--scenario and --random cannot be used together.", ctx)
    from devices import standalone  # the protocol stacks load only when a plant runs

    try:
        code = asyncio.run(standalone.run(standalone.SimulateOptions(**options)))
    except KeyboardInterrupt:
        code = 130
    ctx.exit(code)


def main(argv: list[str] | None = None) -> NoReturn:
    """Run the plant as ``python -m devices``; exits with its exit code (2 on a usage error)."""
    sys.exit(simulate.main(args=argv, prog_name="python -m devices"))
