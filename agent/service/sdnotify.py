"""systemd notification (sd_notify) without a dependency.
Sends datagrams only; never decides when the service is ready or healthy (the service does).

`notify()` is a no-op outside systemd (no NOTIFY_SOCKET). The watchdog
interval is half of WatchdogSec, and only when WATCHDOG_PID is ours. The
service sends WATCHDOG=1 only while its main loop makes real progress; a
pinger that pings unconditionally would hide a stuck agent.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def notify(state: str) -> bool:
    """Send one notification (`READY=1`, `WATCHDOG=1`, `STOPPING=1`, `STATUS=...`)."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr[0] == "@":
        addr = "\0" + addr[1:]  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(addr)
            s.sendall(state.encode())
    except OSError as exc:
        log.warning("sd_notify failed state=%r error=%s", state.split("\n", 1)[0], exc)
        return False
    return True


def watchdog_interval() -> float | None:
    """Seconds between WATCHDOG=1 pings (half of WatchdogSec), or None when no watchdog is set."""
    usec, pid = os.environ.get("WATCHDOG_USEC"), os.environ.get("WATCHDOG_PID")
    if not usec or (pid and int(pid) != os.getpid()):
        return None
    return int(usec) / 2_000_000
