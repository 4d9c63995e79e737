"""Checks of window-key channels across config sections (contract section 8, docs/window-keys.md).

A window channel's ``window`` is checked against its device's poll interval (a warning) and
against the store's key horizon (a problem: exit 78). Pure functions over the typed settings;
the loader calls them once every section is read.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.config.retention import RetentionSettings, days_text
from agent.config.sources import Device
from agent.config.yaml_lines import Problem

MIN_POLLS_PER_WINDOW = 10


def _seconds(value: float) -> str:
    """A duration as the config writes it: ``30d``, ``2h``, ``5m``, ``90s``, ``250ms``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if value >= size and value % size == 0:
            return f"{int(value // size)}{unit}"
    return f"{value * 1000:g}ms" if value < 1 else f"{value:g}s"


def horizon_problems(devices: Iterable[Device], retention: RetentionSettings | None) -> list[Problem]:
    """A window longer than (or as long as) the ``keys`` horizon: the key would be forgotten
    while a second read of the same change can still make it, so that read becomes a new event.
    No ``retention:`` section means keys are never forgotten: nothing to check."""
    if retention is None:
        return []
    keys = retention.keys.total_seconds()
    out = []
    for dev in devices:
        for ch in dev.channels:
            if ch.window is not None and keys <= ch.window:
                out.append(
                    Problem(
                        dev.file,
                        ch.line,
                        f"{ch.path}.window",
                        f"{_seconds(ch.window)} must be shorter than the store's key horizon "
                        f"(store.retention.keys: {days_text(retention.keys)}); a key forgotten inside "
                        "its window lets a later read of the same change become a second event",
                    )
                )
    return out


def window_warnings(devices: Iterable[Device]) -> tuple[str, ...]:
    """``file:line: key: message`` for a window shorter than 10 poll intervals: reads of one change
    then straddle a window boundary too often (each straddle is a second event)."""
    out = []
    for dev in devices:
        for ch in dev.channels:
            if ch.window is not None and ch.window < MIN_POLLS_PER_WINDOW * dev.poll:
                out.append(
                    str(
                        Problem(
                            dev.file,
                            ch.line,
                            f"{ch.path}.window",
                            f"{_seconds(ch.window)} is shorter than {MIN_POLLS_PER_WINDOW} poll intervals "
                            f"({MIN_POLLS_PER_WINDOW} x {_seconds(dev.poll)}); two reads of one change "
                            "straddle a window boundary more often, and each straddle is a second event",
                        )
                    )
                )
    return tuple(out)
