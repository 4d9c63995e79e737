"""The service's event loop hooks: SIGTERM/SIGINT set the stop event, SIGHUP/SIGUSR2 ask for a
reload; known library noise is one line.

Installs handlers on the running loop only; decides nothing about what stopping means (see
`agent.service.run` and `agent.service.shutdown`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def loop_exception(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """paho-mqtt (under aiomqtt) races its own socket on a broker restart: asyncio then logs
    "Exception in callback ... add_writer ... Bad file descriptor" with a traceback. It is known
    and harmless (the sink reconnects; nothing unacknowledged is marked delivered), so it gets
    one line; everything else keeps asyncio's default report."""
    exc = context.get("exception")
    if (
        isinstance(exc, OSError)
        and exc.errno == errno.EBADF
        and "add_writer" in str(context.get("handle", ""))
    ):
        log.warning("socket closed under a pending write (MQTT client after a broker restart): %s", exc)
        return
    unread = "never retrieved" in str(context.get("message", ""))
    if unread and exc is not None and type(exc).__module__.startswith("aiomqtt"):
        # aiomqtt leaves a disconnect future unread when the broker goes away; the sink saw it.
        log.warning("MQTT client: %s", exc)
        return
    loop.default_exception_handler(context)


def install_signal_handlers(stop: asyncio.Event, reload: Callable[[bool], None] | None = None) -> None:
    """SIGTERM and SIGINT set `stop`; SIGHUP calls `reload(False)` and SIGUSR2 `reload(True)` (a
    reload that may change identity, `edge-agent reload --force`); the loop's exception handler
    becomes `loop_exception`."""
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(loop_exception)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if reload is not None:
        loop.add_signal_handler(signal.SIGHUP, reload, False)
        loop.add_signal_handler(signal.SIGUSR2, reload, True)
