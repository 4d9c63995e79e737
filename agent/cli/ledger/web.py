"""`edge-agent ledger web`: the review page (operator.md section 1), and `ledger review mark`.

Loopback and read-only by default; with --auth-file a signed-in person can append review marks
and retry dead notifications (the code of `ledger review mark` and `ledger notifications retry`).
"""

from __future__ import annotations

import asyncio
import getpass
import signal

import click

from agent.cli.ledger.context import LedgerContext, run_ledger
from agent.core.review_mark import Mark, NotReviewable


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise click.BadParameter(f"{value!r} must be HOST:PORT, e.g. 127.0.0.1:8089", param_hint="--listen")
    return host.strip("[]"), int(port)


@click.command("web")
@click.option(
    "--listen", default="127.0.0.1:8089", show_default=True, metavar="HOST:PORT", help="Where to serve."
)
@click.option(
    "--auth-file",
    "auth_file",
    metavar="FILE",
    type=click.Path(exists=True, dir_okay=False, readable=True),
    help="Allow the writes (review marks, notification retries) to whoever signs in with this file's "
    "content (a file, as for the HTTP intake). Without it the page is read-only.",
)
@click.option(
    "--silent-after",
    default=300.0,
    show_default=True,
    type=click.FloatRange(1, 86400 * 30),
    help="Seconds without an arrival or a status record after which a gateway is marked silent.",
)
@click.pass_obj
def web_cmd(obj: LedgerContext, listen: str, auth_file: str | None, silent_after: float) -> None:
    """Serve the review page: overview and fleet, events, conflicts, pending, gaps and boots, notifications.

    Server-rendered HTML (no script), every page filterable in its address and exportable as CSV
    or JSON. GET never changes anything.

    \b
      edge-agent ledger web                                   # http://127.0.0.1:8089/
      edge-agent ledger web --auth-file /etc/edge-ledger/web-token

    Exit 0 after Ctrl-C or SIGTERM, 69 PostgreSQL unreachable, 74 the schema is not this program's.
    """
    from agent.ledger.web.app import make_app, serve
    from agent.ledger.web.pool import Pool
    from agent.ledger.web.security import Guard

    host, port = _listen(listen)
    try:
        guard = Guard.from_file(auth_file)
    except (OSError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="--auth-file") from exc

    async def go() -> None:
        conn = await obj.open(migrate=False)  # the schema must be this program's
        await conn.close()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        app = make_app(Pool(obj.dsn), guard, silent_after=silent_after)
        mode = "marks and retries allowed after sign-in" if guard.writable else "read-only"
        await serve(
            app,
            host,
            port,
            stop=stop,
            ready=lambda p: click.echo(f"review page: http://{host}:{p}/ ({mode}); Ctrl-C stops it"),
        )

    run_ledger(go)


@click.group("review")
def review_group() -> None:
    """A person's review marks on the ledger's conflicts and pending arrivals."""


@review_group.command("mark")
@click.argument("arrival_id", type=int)
@click.option("--note", required=True, metavar="TEXT", help="What was found or decided (kept with the mark).")
@click.option("--by", metavar="NAME", help="Who reviewed it (default: the login name).")
@click.pass_obj
def mark_cmd(obj: LedgerContext, arrival_id: int, note: str, by: str | None) -> None:
    """Append a review mark on the conflict or pending arrival ARRIVAL_ID (nothing else changes).

    \b
      edge-agent ledger review mark 17 --note "PLC resent with a new severity; canonical kept"

    Exit 0 marked, 2 an empty note or no such conflict/pending arrival, 69/74 as every command.
    """
    from agent.ledger import review

    if not note.strip():
        raise click.BadParameter("the note is empty: say what was found or decided", param_hint="--note")
    who = by or _who()

    async def go() -> Mark:
        conn = await obj.open(migrate=False)
        try:
            return await review.mark(conn, arrival_id, note, who)
        except NotReviewable as exc:
            raise click.BadParameter(str(exc), param_hint="ARRIVAL_ID") from exc
        finally:
            await conn.close()

    m = run_ledger(go)
    click.echo(f"arrival {m.arrival_id} ({m.kind}) marked reviewed at {m.marked_at}: {m.note}")


def _who() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


__all__ = ["mark_cmd", "review_group", "web_cmd"]
