"""Shared fixtures for the simulator tests: a manual clock and a two-channel pump controller.

The suite runs with ``--import-mode=importlib``, so test modules cannot import this file;
helpers are fixtures (``make_pump`` is a factory) and each module keeps its own decoders.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from devices.controller import ChannelSpec, Controller, ManualClock

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
logging.getLogger("asyncua").setLevel(logging.CRITICAL)

PumpFactory = Callable[..., Controller]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make_pump(clock: ManualClock) -> PumpFactory:
    """PUMP-07 with Trip (two states, 32-bit counter) and Overload (three states, 16-bit counter)."""

    def make(**kwargs: Any) -> Controller:
        channels = [
            ChannelSpec("Trip"),
            ChannelSpec("Overload", {0: "Off", 1: "On", 2: "Locked"}, counter_bits=16),
        ]
        return Controller("PUMP-07", channels, clock=clock, **kwargs)

    return make


@pytest.fixture
def pump(make_pump: PumpFactory) -> Controller:
    return make_pump()
