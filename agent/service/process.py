"""Which process wrote the live state, told apart from any later process with the same PID.

The service records `mark()` in its live state: host name, the kernel's boot id (new at every
machine start) and its own start time in clock ticks since boot (from /proc). `status` asks
`alive(pid, mark)`: the PID must exist, on the same host, in the same machine boot, with the same
start time; a PID reused by another process after a restart is not the service. Without /proc
(not Linux) only the PID is checked. Reads /proc and signals nothing but signal 0.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _machine_boot_id() -> str | None:
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state is field 3
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def mark() -> dict[str, Any]:
    """This process, as the service records it in its live state."""
    return {
        "host": socket.gethostname(),
        "machine_boot_id": _machine_boot_id(),
        "start_ticks": start_ticks(os.getpid()),
    }


def pid_exists(pid: int) -> bool:
    """True when a process with `pid` exists on this machine (owned by anyone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user (the unit's DynamicUser)
        return True
    return True


def alive(pid: int, recorded: dict[str, Any] | None) -> bool | None:
    """Whether the process that recorded `recorded` (a `mark()`) with `pid` still runs; None when
    that cannot be known from here (the state was written on another host)."""
    if recorded:
        if recorded.get("host") and recorded["host"] != socket.gethostname():
            return None
        boot = _machine_boot_id()
        if recorded.get("machine_boot_id") and boot and recorded["machine_boot_id"] != boot:
            return False  # the machine has started again since
    if not pid_exists(pid):
        return False
    then = (recorded or {}).get("start_ticks")
    now = start_ticks(pid)
    if then is not None and now is not None:
        return bool(then == now)
    return True


def written_bytes(pid: int | str = "self") -> int | None:
    """What the process caused to be written to storage so far (`write_bytes` of /proc/PID/io:
    flash wear), or None where that is not kept (not Linux, or no task I/O accounting)."""
    try:
        with open(f"/proc/{pid}/io", encoding="ascii") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None
