"""Fixtures of the fault suite: the real agent process against real simulators, receivers, brokers.

`checker.py` (the one checker) and `harness.py` (the agent process and the campaigns) are plain
files next to this one, shared with `bench/faults.py`; the suite runs with
`--import-mode=importlib`, so they are put on `sys.path` here and handed out as fixtures.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import ModuleType

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checker as _checker
import harness as _harness

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
logging.getLogger("asyncua").setLevel(logging.CRITICAL)


@pytest.fixture
def harness() -> ModuleType:
    return _harness


@pytest.fixture
def checker() -> ModuleType:
    return _checker
