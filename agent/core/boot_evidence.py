"""A new boot id seen by a tracker, with its evidence (pure): where and how it was read, the old
boot's last recorded transitionIds, the OPC UA server's start time. `agent.core.tracker` keeps
the state; these build what it says."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from agent.core.decide import BootSighting
from agent.core.snapshot import Snapshot


class BootState(Protocol):
    """What a boot sighting reads of its tracker (`agent.core.tracker.DeviceTracker`)."""

    @property
    def device(self) -> str: ...
    @property
    def last_boot(self) -> str | None: ...
    @property
    def counter_boot(self) -> str | None: ...
    @property
    def counters(self) -> Mapping[str, int]: ...
    @property
    def last_start_time(self) -> str | None: ...


def server_restarted(snap: Snapshot, last_start_time: str | None, notes: list[str]) -> bool:
    """Whether ``ServerStatus/StartTime`` moved since the last snapshot (said in a note)."""
    restarted = (
        snap.start_time is not None and last_start_time is not None and snap.start_time != last_start_time
    )
    if restarted:
        notes.append(f"server restarted: ServerStatus/StartTime {last_start_time} -> {snap.start_time}")
    return restarted


def boot_sighting(
    tracker: BootState, snap: Snapshot, boot: str, restarted: bool, notes: list[str]
) -> BootSighting:
    """A boot id other than `tracker`'s last one, with the evidence of where and how it was read."""
    previous = tracker.last_boot
    where = ", ".join(f"{k} {v}" for k, v in snap.boot_where.items()) or "boot id"
    summary = (
        f"boot id ({where}) changed from {previous} to {boot}"
        if previous is not None
        else f"boot id ({where}) read as {boot}"
    )
    evidence: dict[str, Any] = {"summary": summary, **snap.boot_where, "receiver": snap.receiver}
    if previous is not None:
        evidence["previous_value"] = previous
        if tracker.counter_boot == previous and tracker.counters:
            # What the old boot did after this is unknown: said, never made into a gap.
            last = {ch: str(tid) for ch, tid in sorted(tracker.counters.items())}
            evidence["previous_boot_last_transitionId"] = last
            summary += "; last recorded in " + previous + ": "
            summary += ", ".join(f"{ch} {tid}" for ch, tid in last.items())
            evidence["summary"] = summary
        notes.append(summary)
    if snap.start_time is not None:
        evidence["server_start_time"] = snap.start_time
        if restarted:
            evidence["previous_server_start_time"] = tracker.last_start_time
    return BootSighting(tracker.device, boot, snap.read_at, None, True, dict(evidence))
