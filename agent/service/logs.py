"""Logging set-up: one line per event, `key=value` fields, no timestamps under journald.
Configures handlers and levels only; logs nothing of its own.

journald stamps every line itself, so under systemd (EDGE_AGENT_LOG_FORMAT=
journald, or JOURNAL_STREAM set) lines carry a syslog priority prefix
(`<3>` ERROR ... `<7>` DEBUG) instead of a time. Elsewhere they carry an
ISO time. The protocol libraries log only what is critical: asyncua logs
tracebacks and "close_secure_channel was called" every second while a server
is down, pymodbus repeats the agent's own connect failures and appends raw
frames to its error lines (process data, as bytes); the agent logs every
exception it catches itself, once per state change. The client libraries
(aiomqtt, aiosqlite) log from WARNING. A level set higher elsewhere (the OPC UA
poller silences asyncua when it is imported) is never lowered here.
"""

from __future__ import annotations

import logging
import os
import sys

# The least severe level each library may log at, whatever --log-level says.
LIBRARY_FLOORS = {
    "asyncua": logging.CRITICAL,
    "pymodbus": logging.CRITICAL,
    "aiomqtt": logging.WARNING,
    "aiosqlite": logging.WARNING,
}

_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


class JournaldFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        prio = _PRIORITY.get(record.levelno, 6)
        text = f"<{prio}>{record.levelname.lower()} {record.name}: {record.getMessage()}"
        if record.exc_info:
            text += " " + self.formatException(record.exc_info).replace("\n", " | ")
        return text


def under_journald() -> bool:
    return os.environ.get("EDGE_AGENT_LOG_FORMAT") == "journald" or "JOURNAL_STREAM" in os.environ


def setup(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if under_journald():
        handler.setFormatter(JournaldFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name, floor in LIBRARY_FLOORS.items():
        library = logging.getLogger(name)
        library.setLevel(max(floor, root.level, library.level))
