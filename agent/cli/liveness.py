"""Whether the service that wrote a store's live state still runs: its process, then its heartbeat.

The service records its PID (and which process that is: `agent.service.process`) and rewrites
its live state every few seconds (the heartbeat). `status` says "running" only while that process
is alive and the heartbeat is fresh; a live process with a stale heartbeat is "not responding"; a
process that is gone is "stopped", at once, however fresh the last state looks. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

RUNNING = "running"
NOT_RESPONDING = "not_responding"
STOPPED = "stopped"
NEVER_RAN = "never_ran"


@dataclass(frozen=True)
class Liveness:
    state: str  # running | not_responding | stopped | never_ran
    pid: int | None
    pid_alive: bool | None
    heartbeat_at: str | None  # when the service last wrote its live state
    heartbeat_age_s: float | None


def liveness(
    pid: int | None, alive: bool | None, heartbeat_at: str | None, age_s: float | None, stale_after_s: float
) -> Liveness:
    """The service's state from what it recorded (`pid`, `heartbeat_at`, its age) and whether
    that PID is alive now. No live state at all is `never_ran`."""
    if heartbeat_at is None or age_s is None:
        return Liveness(NEVER_RAN, None, None, None, None)
    if alive is False:
        state = STOPPED
    elif age_s >= stale_after_s:
        state = NOT_RESPONDING
    else:
        state = RUNNING
    return Liveness(state, pid, alive, heartbeat_at, round(age_s, 1))
