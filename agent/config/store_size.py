"""How much room a store needs: the `store.max_size` quota must hold the store and its reserve.

`store.reserve` is a file of that size kept next to the store and released when the disk
fills, so that shutdown, alarms and delivered-marks can still commit. The quota counts it:
the database may grow to `max_size - reserve`, and the last `reserve` bytes of the quota are
given to it when the quota is reached (the same reserve, for a quota instead of a disk).
A quota that cannot hold an empty store and its reserve is refused by `check` and by `run`
(exit 78) instead of failing at the first write and restarting in a loop.
"""

from __future__ import annotations

DEFAULT_RESERVE = 4 * 1024 * 1024

# An empty store at the current schema is about 120 KB (29 pages of 4 KiB; a test keeps this
# constant above the real figure). 1 MiB leaves it room for its first batches and live state.
STORE_MIN_BYTES = 1024 * 1024


def smallest_quota(reserve: int) -> int:
    """The smallest `store.max_size` that holds an empty store, room to write, and the reserve."""
    return STORE_MIN_BYTES + reserve


def quota_problem(max_size: int | None, reserve: int) -> str | None:
    """Why `max_size` cannot hold the store and its reserve, or None when it can (or is unset)."""
    if max_size is None or max_size >= smallest_quota(reserve):
        return None
    return (
        f"{max_size} bytes cannot hold the store and its reserve: at least {smallest_quota(reserve)} "
        f"bytes are needed ({STORE_MIN_BYTES} for the store, {reserve} for store.reserve); "
        "raise store.max_size or lower store.reserve"
    )
