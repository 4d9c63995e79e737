"""Figures bench/poll.py shares between its comparisons: poll times per connection, ticks missed,
and the OPC UA polled-read comparison's figures."""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Sequence
from typing import Any

from bench.rounds import median


class Window:
    """Poll completion times per connection, from the moment `open()` is called."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}
        self.opened = False

    def open(self) -> None:
        self.times = {k: [] for k in self.times}
        self.opened = True

    def mark(self, key: str) -> None:
        self.times.setdefault(key, [])
        if self.opened:
            self.times[key].append(time.monotonic())

    def polls(self, keys: Sequence[str] | None = None) -> int:
        return sum(len(v) for k, v in self.times.items() if keys is None or k in keys)

    def interval_p99_ms(self) -> float | None:
        gaps = sorted(b - a for v in self.times.values() for a, b in itertools.pairwise(v))
        return round(gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] * 1000, 1) if gaps else None


def missed_pct(polls: int, wall: float, connections: int, hz: float) -> float:
    return round(max(0.0, 1 - polls / (wall * connections * hz)) * 100, 2)


def compared(
    ag: list[dict[str, Any]],
    ba: list[dict[str, Any]],
    a: argparse.Namespace,
    phased: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """OPC UA polled reads: the agent's pollers against the bare asyncua loop, the same nodes;
    `ba` ticking aligned (the target's baseline), `phased` at the agent's phases."""
    agent_cpu = [r["cpu"] / max(1, r["polls"]) * 1e6 for r in ag]
    bare_cpu = [r["cpu"] / max(1, r["polls"]) * 1e6 for r in ba]
    extra: dict[str, Any] = {}
    if phased:
        phased_cpu = [r["cpu"] / max(1, r["polls"]) * 1e6 for r in phased]
        extra = {
            "bare_phases_cpu_ms_per_1000_polls": round(median(phased_cpu), 1),
            "cpu_per_poll_ratio_phases": round(median(agent_cpu) / median(phased_cpu), 3),
        }
    return {
        "bare_schedule": "aligned (the target's); bare_phases_*: at the agent's phases"
        if phased
        else "phases",
        "controllers": a.opcua,
        "seconds": min(a.seconds, a.opcua_seconds),
        "agent_polls_per_s": round(median([r["polls"] / r["wall"] for r in ag]), 1),
        "bare_polls_per_s": round(median([r["polls"] / r["wall"] for r in ba]), 1),
        "agent_missed_pct": median([missed_pct(r["polls"], r["wall"], a.opcua, a.hz) for r in ag]),
        "bare_missed_pct": median([missed_pct(r["polls"], r["wall"], a.opcua, a.hz) for r in ba]),
        "agent_cpu_ms_per_1000_polls": round(median(agent_cpu), 1),
        "bare_cpu_ms_per_1000_polls": round(median(bare_cpu), 1),
        "cpu_per_poll_ratio": round(median(agent_cpu) / median(bare_cpu), 3),
        **extra,
    }
