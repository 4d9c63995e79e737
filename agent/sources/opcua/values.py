"""What an OPC UA value may be before the agent uses it (pure).

Holds the checks of a scalar field and of a ring array. It must not convert or build anything
from a value: it only says why one is refused.

A server decides the type and size of every value it serves, so a hostile or broken one can
answer a counter's Read with a 10 MiB string, a million-element array or a Variant nested in
Variants. The transport limit (``max_message_size``) bounds what is received at all; these
checks refuse what fits but is no value the agent reads, before anything is built from it:

* a scalar field (boot id, transition id, state, time, latched value, ring head and
  capacity) must be a bool, an integer, a float, a text of at most ``MAX_TEXT`` characters
  or a date-time;
* a ring field must be an array of at most ``ring.slots.count`` such scalars.

A refused value fails that field like a Bad status (per-field error, logged once, the other
channels go on); the text says what came instead.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

MAX_TEXT = 1024
SCALARS = (bool, int, float, str, datetime)


def _what(value: Any) -> str:
    if isinstance(value, list | tuple):
        if any(type(v).__name__ == "Variant" for v in value[:1]):
            return f"an array of {len(value)} nested Variants"
        return f"an array of {len(value)} elements"
    if isinstance(value, str):
        return f"a text of {len(value)} characters"
    if isinstance(value, bytes | bytearray):
        return f"a byte string of {len(value)} bytes"
    return f"a {type(value).__name__}"


def scalar_problem(value: Any) -> str | None:
    """Why ``value`` is refused where one value is expected (None: accepted)."""
    if isinstance(value, str):
        return None if len(value) <= MAX_TEXT else f"{_what(value)} (at most {MAX_TEXT})"
    if value is None or isinstance(value, SCALARS):  # None: an empty Variant
        return None
    return f"{_what(value)} where one value is expected"


def array_problem(value: Any, max_len: int) -> str | None:
    """Why ``value`` is refused where an array of at most ``max_len`` scalars is expected."""
    if value is None:
        return None
    if not isinstance(value, list | tuple):
        return f"{_what(value)} where an array is expected"
    if len(value) > max_len:
        return f"{_what(value)}, more than the {max_len} slots configured"
    for v in value:
        if (problem := scalar_problem(v)) is not None:
            return f"an array element is {problem.removesuffix(' where one value is expected')}"
    return None
