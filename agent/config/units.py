"""Units of the configuration: durations (``250ms``, ``5s``, ``30d``) and sizes (``512MB``, ``2GiB``).

One parser each, used by every reader of the configuration and by the command-line options.
Pure: no YAML, no files; the callers attach file, line and key to the errors raised here.
"""

from __future__ import annotations

import re
from typing import Any

from agent.core.errors import ConfigError

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)\s*", re.IGNORECASE)
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*", re.IGNORECASE)
_BYTES = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


class UnitError(ConfigError, ValueError):
    """A value is not a duration or a size (a ``ConfigError`` and a ``ValueError``)."""


def parse_duration(value: Any) -> float:
    """``500ms``, ``5s``, ``15m``, ``12h``, ``30d``, ``2w`` (any case) -> seconds.

    A bare number is refused: a duration always carries its unit.
    """
    m = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise UnitError(
            f"{value!r} is not a duration; write a number and a unit, e.g. 250ms, 5s, 2m, 12h, 30d"
        )
    return float(m.group(1)) * _SECONDS[m.group(2).lower()]


def parse_size(value: Any) -> int:
    """``512MB``, ``2GiB``, ``1048576`` (bytes) -> bytes; ``KB``/``MB`` count 1000, ``KiB``/``MiB`` 1024."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = _SIZE.fullmatch(str(value))
    if m is None:
        raise UnitError(f"size {value!r} is not understood; write e.g. 512MB, 2GB or 1GiB")
    return int(float(m.group(1)) * _BYTES[(m.group(2) or "").lower()])
