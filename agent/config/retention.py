"""The ``store.retention`` settings: horizons and pruning pace, read with file:line like all config.

Only settings and their checks live here; what is due when (cutoffs, verdicts) is the pure policy
in `agent.core.retention`, and the pruning itself is the store's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from agent.config.units import parse_duration
from agent.config.yaml_lines import Problem, _Ctx, _Section
from agent.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """The `store.retention` section of the config, with safe defaults.

    `batch_rows` bounds each pruning transaction (rows examined), so the
    recorder never waits long for the write lock; `vacuum_pages` bounds each
    `PRAGMA incremental_vacuum(N)` step. `duty` caps the share of wall time the
    pruner holds the write lock (it sleeps between batches accordingly), so a
    busy recorder keeps most of it. `high_water` is the share of the size
    budget at which `status` and the log warn.
    """

    arrivals: timedelta = timedelta(days=30)
    payloads: timedelta = timedelta(days=90)
    keys: timedelta = timedelta(days=400)
    interval: timedelta = timedelta(minutes=15)
    batch_rows: int = 2000
    vacuum_pages: int = 1024
    duty: float = 0.2
    high_water: float = 0.8


DEFAULTS = RetentionSettings()
HORIZONS = ("arrivals", "payloads", "keys", "interval")
_KNOWN = tuple(sorted(RetentionSettings.__dataclass_fields__))


def _span(value: Any) -> timedelta:
    span = timedelta(seconds=parse_duration(value))
    if span <= timedelta(0):
        raise ValueError("must be longer than zero")
    return span


def _number(kind: type, low: float, high: float) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (kind is int and not isinstance(value, int))
        ):
            raise ValueError(f"{value!r} is not {'an integer' if kind is int else 'a number'}")
        if not low <= value <= high:
            raise ValueError(f"{value!r} must be between {low:g} and {high:g}")
        return kind(value)

    return check


_LIMITS = {
    "batch_rows": _number(int, 10, 100_000),
    "vacuum_pages": _number(int, 1, 1_000_000),
    "duty": _number(float, 0.01, 1.0),
    "high_water": _number(float, 0.05, 1.0),
}


def read_retention(s: _Section) -> RetentionSettings:
    """The settings of one `retention:` mapping; every problem is recorded with its line."""
    for name in list(s.data):
        if str(name) not in _KNOWN:
            s.problem(str(name), f"unknown setting; known: {', '.join(_KNOWN)}")
    before = len(s.ctx.problems)
    got: dict[str, Any] = {}
    for name in HORIZONS:
        if s.has(name):
            got[name] = s.get(name, _span, getattr(DEFAULTS, name))
    for name, check in _LIMITS.items():
        if s.has(name):
            got[name] = s.get(name, check, getattr(DEFAULTS, name))
    settings = RetentionSettings(**got)
    if len(s.ctx.problems) == before:
        for key, message in order_problems(settings):
            s.problem(key, message)
    return settings


def parse_retention(doc: Mapping[str, Any] | None, where: str = "store.retention") -> RetentionSettings:
    """Settings from a plain mapping (no line numbers); missing keys keep defaults.

    Raises ConfigError naming each bad key (`store.retention.keys: ...`).
    """
    if doc is None:
        return DEFAULTS
    problems: list[Problem] = []
    settings = read_retention(_Section(_Ctx("", problems), doc, where, 0))
    if problems:
        raise ConfigError("; ".join(f"{p.key}: {p.message}" for p in problems))
    return settings


def horizon(value: Any, key: str) -> timedelta:
    """One horizon given outside the config (a command-line option): ConfigError naming `key`."""
    try:
        return _span(value)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from exc


def order_problems(s: RetentionSettings) -> list[tuple[str, str]]:
    """The arrival log never outlives its canonical event; keys outlive payloads."""
    out: list[tuple[str, str]] = []
    if s.arrivals > s.payloads:
        out.append(
            (
                "arrivals",
                f"{days_text(s.arrivals)} is longer than payloads ({days_text(s.payloads)}); "
                "the arrival log of an event cannot outlive the event",
            )
        )
    if s.keys <= s.payloads:
        out.append(
            (
                "keys",
                f"{days_text(s.keys)} must be longer than payloads ({days_text(s.payloads)}), "
                "and longer than the longest possible replay delay (see docs/retention.md)",
            )
        )
    return out


def check_order(s: RetentionSettings, where: str = "store.retention") -> None:
    """Raise ConfigError (`<where>.<key>: ...`) when the horizons are in the wrong order."""
    for key, message in order_problems(s):
        raise ConfigError(f"{where}.{key}: {message}")


def days_text(t: timedelta) -> str:
    return f"{t.total_seconds() / 86400:g}d"
