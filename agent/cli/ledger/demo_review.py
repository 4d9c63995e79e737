"""The end of `ledger demo`: a conflict and a pending arrival to review, and the review page kept
open until Ctrl-C, so a newcomer clicks through what the ledger leaves to people."""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
from collections.abc import Callable
from pathlib import Path


def example_lines(site: str) -> list[dict[str, object]]:
    """Two gateways disagreeing on one transition (a conflict) and an arrival without a boot id
    (identity-incomplete: pending). Their sources are `<site>-review/...`, apart from the demo's."""
    src = f"{site}-review"
    return [
        {"source": f"{src}/PUMP-08/Trip", "transitionId": "T40", "bootId": "B5",
         "sourceTimestamp": "2026-04-22T11:00:00.000Z", "arrivalAt": "2026-04-22T11:00:00.100Z",
         "gateway": "gw-1", "payload": {"state": "Trip", "severity": "High"}},
        {"source": f"{src}/PUMP-08/Trip", "transitionId": "T40", "bootId": "B5",
         "sourceTimestamp": "2026-04-22T11:00:00.000Z", "arrivalAt": "2026-04-22T11:00:02.500Z",
         "gateway": "gw-2", "payload": {"state": "Trip", "severity": "Low"}},
        {"source": f"{src}/CTRL-03/OverTemp", "transitionId": "T22",
         "sourceTimestamp": "2026-04-22T12:00:00.000Z", "arrivalAt": "2026-04-22T12:00:00.400Z",
         "gateway": "gw-1", "payload": {"state": "OverTemp", "severity": "Medium"}},
    ]  # fmt: skip


async def add_examples(dsn: str | None, site: str, work: Path) -> None:
    """Import the example lines as `ledger import` does (committed, decided by the arbiter)."""
    from agent.ledger import arbiter
    from agent.ledger.arrivals import from_import
    from agent.ledger.connection import connect
    from agent.sources.importer import read_batches

    path = work / "review-examples.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in example_lines(site)))
    conn = await connect(dsn)
    try:
        for batch in read_batches(path, receiver="ledger-import:demo"):
            await arbiter.record(conn, [from_import(it, "demo") for it in batch.items])
    finally:
        await conn.close()


def serve_until_interrupted(
    dsn: str | None, host: str, port: int, work: Path, say: Callable[[str], None]
) -> None:
    """Serve the review page (marks allowed with the token written to `work`) until Ctrl-C."""
    from agent.ledger.web.app import make_app, serve
    from agent.ledger.web.pool import Pool
    from agent.ledger.web.security import Guard

    token_file = work / "web-token"
    token_file.write_text(secrets.token_urlsafe(18) + "\n")
    token_file.chmod(0o600)

    async def go() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        app = make_app(Pool(dsn, size=2), Guard.from_file(str(token_file)))

        def ready(bound: int) -> None:
            say(f"review page: http://{host}:{bound}/  (conflicts: /conflicts, pending: /pending)")
            say(f"to try a review mark, sign in with the token in {token_file}; Ctrl-C stops the page")

        await serve(app, host, port, stop=stop, ready=ready)

    asyncio.run(go())
