"""Fixtures of the fault suite: the real agent process against real simulators, receivers, brokers.

`checker.py` (the one checker) and `harness.py` (the agent process and the campaigns) are plain
files next to this one, shared with `bench/faults.py`; the suite runs with
`--import-mode=importlib`, so they are put on `sys.path` here and handed out as fixtures.
"""

from __future__ import annotations

import logging
import shutil
import socket
import sys
from pathlib import Path
from types import ModuleType

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checker as _checker  # noqa: E402
import harness as _harness  # noqa: E402

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
logging.getLogger("asyncua").setLevel(logging.CRITICAL)

MOSQUITTO = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def harness() -> ModuleType:
    return _harness


@pytest.fixture
def checker() -> ModuleType:
    return _checker
