"""`edge-agent ledger demo`: the command; its processes are `agent.cli.ledger.demo_run`."""

from __future__ import annotations

import sys
import time

import click

from agent.cli.context import EX_UNAVAILABLE
from agent.cli.ledger.context import LedgerContext, run_ledger
from agent.cli.ledger.report import write_tables


@click.command("demo")
@click.option(
    "--mqtt",
    "mqtt",
    metavar="HOST:PORT",
    default="127.0.0.1:1883",
    show_default=True,
    help="The MQTT broker the gateways publish to and the ledger subscribes at.",
)
@click.option(
    "--seconds",
    default=15.0,
    show_default=True,
    type=click.FloatRange(3, 3600),
    help="How long the PLC runs.",
)
@click.option(
    "--keep", metavar="DIR", help="Put configs, stores and logs here (default: a new temporary directory)."
)
@click.pass_obj
def demo_cmd(obj: LedgerContext, mqtt: str, seconds: float, keep: str | None) -> None:
    """Two gateways, one simulated PLC, one canonical event with two arrivals.

    Starts a simulated PLC (Modbus TCP, a free port), two `edge-agent run` gateways (gw-1,
    gw-2) that read it and publish over MQTT, and `edge-agent ledger run` on a topic of the
    demo's own; after --seconds it stops them all, prints the ledger's report and checks that
    each of the demo's events is one canonical event with an arrival from each gateway. The
    ledger database is migrated if needed; the demo's events stay in it (source demo-XXXXXX/...).

    \b
      edge-agent ledger --dsn "host=127.0.0.1 dbname=ledger" demo
      edge-agent ledger demo --mqtt 127.0.0.1:1883 --seconds 30 --keep ./ledger-demo

    Exit 0 when every demo event has arrivals from both gateways, 1 when not (or a part did not
    start; its log is named), 69 no broker at --mqtt or PostgreSQL unreachable, 74/78 as for every
    ledger command.
    """
    from agent.cli.ledger import demo_run
    from agent.core.wording import counted
    from agent.ledger import report

    host, _, port = mqtt.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(f"{mqtt!r} must be HOST:PORT, e.g. 127.0.0.1:1883", param_hint="--mqtt")
    why = demo_run.broker_reachable(host, int(port))
    if why is not None:
        click.echo(f"edge-agent ledger demo: {why}: start one (e.g. mosquitto) or give --mqtt", err=True)
        sys.exit(EX_UNAVAILABLE)

    async def migrate() -> None:
        conn = await obj.open(migrate=True)
        await conn.close()

    run_ledger(migrate)
    t0 = time.monotonic()

    def say(text: str) -> None:
        click.echo(f"[{time.monotonic() - t0:5.1f}s] {text}")

    try:
        work, site = demo_run.run(
            dsn=obj.dsn, mqtt_host=host, mqtt_port=int(port), seconds=seconds, keep=keep, say=say
        )
    except demo_run.DemoFailed as exc:
        click.echo(f"edge-agent ledger demo: {exc}", err=True)
        sys.exit(1)

    async def show() -> dict[str, int]:
        conn = await obj.open(migrate=False)
        try:
            async with report.snapshot(conn):
                click.echo("")
                await write_tables(conn, await report.summary(conn), 40)
                return await report.site_tally(conn, site)
        finally:
            await conn.close()

    tally = run_ledger(show)
    click.echo("")
    click.echo(
        f"demo ({site}): {tally['events']} canonical events from {tally['arrivals']} arrivals;"
        f" {tally['from_both']} of them arrived from both gateways;"
        f" {counted(tally['boots'], 'boot')} observed."
    )
    click.echo(f"configs, stores and logs: {work}")
    if tally["events"] == 0 or tally["from_both"] != tally["events"]:
        click.echo(
            "edge-agent ledger demo: not every event arrived from both gateways; see the logs", err=True
        )
        sys.exit(1)
