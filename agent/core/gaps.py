"""Counter steps and gaps (pure): the transitions a counter's step skipped, the anomaly of a step
back (wrap or reset), and the gaps left once a read's ring entries are taken out. Never a
transition invented: a gap names a range, the store takes out what it already holds."""

from __future__ import annotations

from collections.abc import Iterable

from agent.core.contract import Anomaly, Delivery
from agent.core.snapshot import ChannelRead, Snapshot, is_wrap

Range = tuple[int, int]


def subtract(ranges: Iterable[Range], taken: set[int]) -> list[Range]:
    """Inclusive ranges minus the values in ``taken``, as inclusive ranges again."""
    out: list[Range] = []
    for lo, hi in ranges:
        inside = sorted(v for v in taken if lo <= v <= hi)
        start = lo
        for v in inside:
            if v > start:
                out.append((start, v - 1))
            start = v + 1
        if start <= hi:
            out.append((start, hi))
    return out


def counter_step(
    device: str, snap: Snapshot, ch: ChannelRead, last: int, tid: int, notes: list[str]
) -> tuple[list[Range] | None, Anomaly | None]:
    """The transitions a counter skipped, and the anomaly of a step back (wrap or reset)."""
    if tid > last:
        return ([(last + 1, tid - 1)] if tid - last > 1 else None), None
    wrap = is_wrap(last, tid, ch.bits)
    kind = "wrap" if wrap else "reset"
    notes.append(f"{ch.channel}: counter {kind} {last} -> {tid}")
    anomaly = None
    if snap.boot_id is not None:
        anomaly = Anomaly(
            f"{device}/{ch.channel}",
            snap.boot_id,
            kind,
            str(last),
            str(tid),
            snap.read_at,
            {"receiver": snap.receiver, "bits": ch.bits},
        )
    if not wrap:
        return None, anomaly
    top = 2**ch.bits - 1
    return [r for r in ((last + 1, top), (1, tid - 1)) if r[0] <= r[1]], anomaly


def gap_anomalies(
    device: str, snap: Snapshot, missing: dict[str, list[Range]], overran: bool, buffered: list[Delivery]
) -> list[Anomaly]:
    """The missed ranges less what this read's ring supplied (the store takes out the rest)."""
    boot = snap.boot_id
    if boot is None:
        return []  # an anomaly names a generation; none is made up
    out = []
    for channel, ranges in missing.items():
        source = f"{device}/{channel}"
        seen = {
            int(d.transition_id)
            for d in buffered
            if d.source == source and d.boot_id == boot and d.transition_id
        }
        for lo, hi in subtract(ranges, seen):
            kind = "overrun" if overran else "gap"
            evidence = {"receiver": snap.receiver, "ring_read": snap.ring is not None}
            if snap.ring_error:
                evidence["ring_error"] = snap.ring_error
            out.append(Anomaly(f"{device}/{channel}", boot, kind, str(lo), str(hi), snap.read_at, evidence))
    return out
