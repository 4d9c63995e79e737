"""`edge-agent ledger demo`: the command; its processes are `agent.cli.ledger.demo_run`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeVar

import click

from agent.cli.context import EX_UNAVAILABLE
from agent.cli.ledger.context import LedgerContext, run_ledger
from agent.cli.ledger.report import write_tables

if TYPE_CHECKING:
    from agent.cli.ledger import throwaway

B = TypeVar("B")
R = TypeVar("R")


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
@click.option(
    "--web/--no-web",
    "web",
    default=None,
    help="At the end, serve the review page until Ctrl-C (default: when run in a terminal).",
)
@click.option(
    "--web-listen",
    default="127.0.0.1:8089",
    show_default=True,
    metavar="HOST:PORT",
    help="Where the review page listens (a free port when this one is taken).",
)
@click.pass_context
def demo_cmd(
    ctx: click.Context, mqtt: str, seconds: float, keep: str | None, web: bool | None, web_listen: str
) -> None:
    """Two gateways, one simulated PLC, one canonical event with two arrivals.

    Starts a simulated PLC (Modbus TCP, a free port), two `edge-agent run` gateways (gw-1,
    gw-2) that read it and publish over MQTT, and `edge-agent ledger run` on a topic of the
    demo's own; after --seconds it stops them all, prints the ledger's report and checks that
    each of the demo's events is one canonical event with an arrival from each gateway. The
    ledger database is migrated if needed; the demo's events stay in it (source demo-XXXXXX/...).
    Then it adds a conflict and a pending arrival (source demo-XXXXXX-review/...) and, in a
    terminal, serves the review page until Ctrl-C.

    On a fresh machine: with no PostgreSQL configured (no --dsn, EDGE_LEDGER_DSN or PG*
    variables) it starts a throwaway cluster when the PostgreSQL server binaries are installed,
    and its own Mosquitto when nothing listens at the default --mqtt; it says what to install
    when they are missing. Both are removed at the end.

    \b
      edge-agent ledger demo                      # fresh machine: everything of its own
      edge-agent ledger --dsn "host=127.0.0.1 dbname=ledger" demo
      edge-agent ledger demo --mqtt 127.0.0.1:1883 --seconds 30 --keep ./ledger-demo --no-web

    Exit 0 when every demo event has arrivals from both gateways, 1 when not (or a part did not
    start; its log is named), 69 no broker at --mqtt or PostgreSQL unreachable, 74/78 as for every
    ledger command.
    """
    from agent.cli.ledger import throwaway

    obj: LedgerContext = ctx.obj
    host, _, port = mqtt.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(f"{mqtt!r} must be HOST:PORT, e.g. 127.0.0.1:1883", param_hint="--mqtt")
    web_host, web_port = _listen(web_listen)
    own_mqtt = ctx.get_parameter_source("mqtt") is click.core.ParameterSource.DEFAULT
    cleanup: list[Callable[[], None]] = []
    try:
        if not throwaway.postgres_configured(obj.dsn):
            dsn = _start_own(
                cleanup,
                throwaway.pg_binaries(),
                throwaway.INSTALL_POSTGRES,
                throwaway.ThrowawayPostgres,
                "no PostgreSQL configured: started a throwaway one on 127.0.0.1:{port} (removed at the end)",
            )
            obj = LedgerContext(dsn)
        if own_mqtt and not throwaway.listening(int(port), host):
            own_port = _start_own(
                cleanup,
                throwaway.mosquitto_binary(),
                throwaway.INSTALL_MOSQUITTO,
                throwaway.OwnBroker,
                "no MQTT broker at 127.0.0.1:1883: started mosquitto on 127.0.0.1:{port}"
                " (stopped at the end)",
            )
            host, port = "127.0.0.1", str(own_port)
        _demo(obj, host, int(port), seconds, keep, web, web_host, web_port)
    finally:
        for undo in reversed(cleanup):
            undo()


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(f"{value!r} must be HOST:PORT", param_hint="--web-listen")
    return host, int(port)


def _unavailable(why: object) -> NoReturn:
    click.echo(f"edge-agent ledger demo: {why}", err=True)
    sys.exit(EX_UNAVAILABLE)


def _start_own(
    cleanup: list[Callable[[], None]],
    found: B | None,
    install: str,
    make: Callable[[B], throwaway.OwnPart[R]],
    started: str,
) -> R:
    """Start a part of the demo's own from what was `found` (else: exit 69 saying what to `install`),
    stopped at the end; say it `started` (a text with its {port}); exit 69 when it does not start."""
    from agent.cli.ledger import throwaway

    if found is None:
        _unavailable(install)
    part = make(found)
    cleanup.append(part.stop)
    try:
        got = part.start()
    except throwaway.Unavailable as exc:
        _unavailable(exc)
    click.echo(started.format(port=part.port))
    return got


def _demo(
    obj: LedgerContext,
    host: str,
    port: int,
    seconds: float,
    keep: str | None,
    web: bool | None,
    web_host: str,
    web_port: int,
) -> None:
    from agent.cli.ledger import demo_review, demo_run, throwaway

    why = demo_run.broker_reachable(host, port)
    if why is not None:
        _unavailable(f"{why}: start one (e.g. mosquitto) or give --mqtt")

    async def migrate() -> None:
        conn = await obj.open(migrate=True)
        await conn.close()

    run_ledger(migrate)
    t0 = time.monotonic()

    def say(text: str) -> None:
        click.echo(f"[{time.monotonic() - t0:5.1f}s] {text}")

    try:
        work, site = demo_run.run(
            dsn=obj.dsn, mqtt_host=host, mqtt_port=port, seconds=seconds, keep=keep, say=say
        )
    except demo_run.DemoFailed as exc:
        click.echo(f"edge-agent ledger demo: {exc}", err=True)
        sys.exit(1)

    _show_result(obj, site, work)
    run_ledger(lambda: demo_review.add_examples(obj.dsn, site, work))
    click.echo(f"added a conflict and a pending arrival to review (sources {site}-review/...)")
    if web is None:
        web = sys.stdin.isatty() and sys.stdout.isatty()
    if web:
        if throwaway.listening(web_port, web_host):
            web_port = 0  # taken: a free one
        demo_review.serve_until_interrupted(obj.dsn, web_host, web_port, work, say)


def _show_result(obj: LedgerContext, site: str, work: Path) -> None:
    """The ledger's tables after the demo, and its own check: every event arrived from both
    gateways (exit 1 otherwise)."""
    from agent.core.wording import counted
    from agent.ledger import report

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
