"""`edge-agent ledger run`: the intakes over one Writer, until SIGTERM.

Start: read the password file, try PostgreSQL once (and migrate); when it is down the intakes
still start and refuse to acknowledge (HTTP 503, MQTT holds its PUBACKs) until it returns.
The notifier (when `notify` rules exist) works on its own connection, woken by the arbiter's
NOTIFY and polling every second anyway. With `retention:`, a prune every `retention.every`
(`agent.ledger.prune_schedule`), and the writer decides against the identity horizon.
SIGHUP: read `ledger.yaml` again without stopping (`agent.ledger.reload`).
SIGTERM / SIGINT: stop taking new work, let in-flight batches commit (or fail unacknowledged),
let in-flight notifications settle, close, exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

from agent.ledger.config import LedgerConfig
from agent.ledger.errors import LedgerUnavailable
from agent.ledger.reload import LedgerParts
from agent.ledger.side_servers import side_servers
from agent.ledger.status_intake import StatusStore
from agent.ledger.writer import Writer

log = logging.getLogger(__name__)


async def run(
    config: LedgerConfig,
    *,
    dsn: str | None = None,
    stop: asyncio.Event | None = None,
    reload: asyncio.Event | None = None,
) -> None:
    """Run until `stop` is set (or SIGTERM/SIGINT when no event is given); `reload` set (or SIGHUP
    then) reads the configuration file again (`agent.ledger.reload`)."""
    asked = reload or asyncio.Event()
    if stop is None:
        stop = _on_signals(asked)
    password = _password(config)
    writer = _writer(config, dsn, password)
    try:
        await writer.connect_now()  # connect and migrate now, so a wrong DSN shows at start
    except LedgerUnavailable as exc:
        log.warning("%s: intake starts and refuses to acknowledge until PostgreSQL is back", exc)
    # What the config does not ask for is not imported (aiohttp, the notifier): start-up is CPU.
    http = None
    if config.http is not None:
        from agent.ledger.intake_http import HttpServer

        http = HttpServer(config.http, writer)
    notifier = None
    if config.notify:
        notifier = _notifier(dsn or config.dsn, password)
    statuses = StatusStore(dsn or config.dsn, password=password)
    if http is not None:
        http.status_store = statuses
    try:
        if http is not None:
            await http.start()
        async with asyncio.TaskGroup() as tg:
            parts = LedgerParts(
                tg, config, writer, statuses, notifier=lambda: _notifier(dsn or config.dsn, password)
            )
            parts.start_intakes(config)
            for name, side in side_servers(
                config, dsn or config.dsn, password, stop, reloads=parts.hooks, reported=parts.reported
            ):
                tg.create_task(side, name=name)
            if notifier is not None:
                parts.start("notifier", notifier.run)
            tg.create_task(_partitions(config, dsn, password, stop), name="partitions")
            if config.retention is not None:
                from agent.ledger.prune_schedule import prune_every

                tg.create_task(prune_every(dsn or config.dsn, password, config.retention, stop), name="prune")
            log.info("ledger running")
            await _serve_reloads(parts, stop, asked)
            log.info("ledger stopping")
            parts.stop_all()
    finally:
        if http is not None:
            await http.stop()
        await statuses.close()
        await writer.close()


async def _partitions(
    config: LedgerConfig, dsn: str | None, password: str | None, stop: asyncio.Event
) -> None:
    """The time partitions ahead, now and every hour: the period and how many ahead from
    `retention:` (a month, 2 without it)."""
    from agent.ledger.prune_schedule import partitions_every

    r = config.retention
    period, ahead = (r.partition, r.partitions_ahead) if r is not None else ("month", 2)
    await partitions_every(dsn or config.dsn, password, period, ahead, stop)


def _writer(config: LedgerConfig, dsn: str | None, password: str | None) -> Writer:
    return Writer(
        dsn or config.dsn,
        password=password,
        rules=config.notify,
        require_sync_standby=config.require_sync_standby,
        horizon_s=config.retention.identity_horizon_s if config.retention else None,
        keys_s=config.retention.arrivals_s if config.retention else None,
    )


def _password(config: LedgerConfig) -> str | None:
    """The database password from `password_file` (its trailing newline stripped), if one is named."""
    if not config.password_file:
        return None
    return Path(config.password_file).read_text(encoding="utf-8").rstrip("\r\n")


def _notifier(dsn: str | None, password: str | None) -> Any:
    from agent.ledger.notifier import Notifier  # imported only when rules exist

    return Notifier(dsn, password=password)


async def _serve_reloads(parts: LedgerParts, stop: asyncio.Event, asked: asyncio.Event) -> None:
    """Until `stop`: each reload asked for (SIGHUP) is done, one at a time."""
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while not stop.is_set():
            waiting = asyncio.ensure_future(asked.wait())
            await asyncio.wait({stopping, waiting}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if stop.is_set():
                return
            asked.clear()
            await parts.reload()
    finally:
        stopping.cancel()


def _on_signals(reload: asyncio.Event) -> asyncio.Event:
    """SIGTERM/SIGINT set the returned stop event; SIGHUP sets `reload`."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload.set)
    return stop
