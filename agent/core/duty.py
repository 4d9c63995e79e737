"""A duty cycle: how long background work rests after a piece of it, so that it takes at most a
share of the wall time (the gateway's prune holding the store's write lock, the ledger's prune
sharing the database's and the host's CPU with the intake). Pure."""

from __future__ import annotations


def rest_after(took_s: float, duty: float) -> float:
    """Seconds to rest after work that took `took_s`, so work is at most `duty` (0 < duty <= 1)
    of the time: `took * (1 - duty) / duty` (1.0: no rest)."""
    if not 0.0 < duty <= 1.0:
        raise ValueError(f"duty {duty!r} must be in (0, 1]")
    return max(0.0, took_s) * (1.0 - duty) / duty
