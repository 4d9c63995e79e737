"""Logging set-up: one line per event, `key=value` fields, no timestamps under journald.
Configures handlers and levels only; logs nothing of its own.

journald stamps every line itself, so under systemd (EDGE_AGENT_LOG_FORMAT=
journald, or JOURNAL_STREAM set) lines carry a syslog priority prefix
(`<3>` ERROR ... `<7>` DEBUG) instead of a time. Elsewhere they carry an
ISO time. The noisy library loggers (asyncua, pymodbus) are capped at
WARNING: pymodbus appends raw frames to its error lines, which can expose
process data; the agent logs the exceptions it catches itself.
"""

from __future__ import annotations

import logging
import os
import sys

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
    for noisy in ("asyncua", "pymodbus", "aiomqtt", "aiosqlite"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
