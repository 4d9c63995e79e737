"""Capped exponential backoff with injected jitter (pure: no clock, no random source).

After the n-th consecutive failure (n >= 1) the base delay is
`initial_s * 2**(n-1)`, capped at `max_s`. "Equal jitter" then picks a delay
in `[base/2, base)`: a fleet of gateways that lost the same broker does not
reconnect in lockstep, and no delay collapses to zero (as full jitter can),
which would hammer an upstream that is still down.

A server's own `Retry-After` wins when it asks for longer; it is capped at
`retry_after_cap_s` so that a broken header cannot park a queue for days.
"""

from __future__ import annotations

RETRY_AFTER_CAP_S = 3600.0


def backoff_s(failures: int, *, initial_s: float, max_s: float, jitter: float) -> float:
    """Seconds to wait after `failures` consecutive failures; `jitter` is a number in [0, 1)."""
    if failures <= 0:
        return 0.0
    if not 0.0 <= jitter < 1.0:
        raise ValueError(f"jitter must be in [0, 1), got {jitter}")
    # 2**(n-1) overflows a float near n = 1025; the cap is reached long before.
    base = max_s if failures > 64 else min(max_s, initial_s * 2.0 ** (failures - 1))
    return base / 2.0 + (base / 2.0) * jitter


def retry_delay_s(
    failures: int,
    *,
    initial_s: float,
    max_s: float,
    jitter: float,
    retry_after_s: float | None = None,
    retry_after_cap_s: float = RETRY_AFTER_CAP_S,
) -> float:
    """The delay before the next attempt: our backoff, or the server's `Retry-After` when longer."""
    delay = backoff_s(failures, initial_s=initial_s, max_s=max_s, jitter=jitter)
    if retry_after_s is not None and retry_after_s > delay:
        delay = min(retry_after_s, retry_after_cap_s)
    return delay
