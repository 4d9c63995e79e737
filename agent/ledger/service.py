"""`edge-agent ledger run`: the intakes over one Writer, until SIGTERM.

Start: read the password file, try PostgreSQL once (and migrate); when it is down the intakes
still start and refuse to acknowledge (HTTP 503, MQTT holds its PUBACKs) until it returns.
The notifier (when `notify` rules exist) works on its own connection, woken by the arbiter's
NOTIFY and polling every second anyway.
SIGTERM / SIGINT: stop taking new work, let in-flight batches commit (or fail unacknowledged),
let in-flight notifications settle, close, exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from agent.ledger.config import LedgerConfig
from agent.ledger.errors import LedgerUnavailable
from agent.ledger.intake_mqtt import MqttSubscriber
from agent.ledger.side_servers import side_servers
from agent.ledger.status_intake import StatusStore, run_mqtt
from agent.ledger.writer import Writer

log = logging.getLogger(__name__)


async def run(config: LedgerConfig, *, dsn: str | None = None, stop: asyncio.Event | None = None) -> None:
    """Run until `stop` is set (or SIGTERM/SIGINT when no event is given)."""
    stop = stop or _stop_on_signals()
    password = (
        Path(config.password_file).read_text(encoding="utf-8").rstrip("\r\n")
        if config.password_file
        else None
    )
    writer = Writer(
        dsn or config.dsn,
        password=password,
        rules=config.notify,
        require_sync_standby=config.require_sync_standby,
    )
    try:
        await writer.connect_now()  # connect and migrate now, so a wrong DSN shows at start
    except LedgerUnavailable as exc:
        log.warning("%s: intake starts and refuses to acknowledge until PostgreSQL is back", exc)
    # What the config does not ask for is not imported (aiohttp, the notifier): start-up is CPU.
    http = None
    if config.http is not None:
        from agent.ledger.intake_http import HttpServer

        http = HttpServer(config.http, writer)
    mqtt = MqttSubscriber(config.mqtt, writer) if config.mqtt is not None else None
    notifier = None
    if config.notify:
        from agent.ledger.notifier import Notifier

        notifier = Notifier(dsn or config.dsn, password=password)
    statuses = StatusStore(dsn or config.dsn, password=password)
    if http is not None:
        http.status_store = statuses
    try:
        if http is not None:
            await http.start()
        async with asyncio.TaskGroup() as tg:
            if mqtt is not None:
                tg.create_task(mqtt.run(stop), name="mqtt-intake")
            if config.mqtt is not None:
                tg.create_task(
                    run_mqtt(config.mqtt, config.status_topic, statuses, stop), name="status-intake"
                )
            for name, side in side_servers(config, dsn or config.dsn, password, stop):
                tg.create_task(side, name=name)
            if notifier is not None:
                tg.create_task(notifier.run(stop), name="notifier")
            log.info("ledger running")
            await stop.wait()
            log.info("ledger stopping")
    finally:
        if http is not None:
            await http.stop()
        await statuses.close()
        await writer.close()


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop
