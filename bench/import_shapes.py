"""The files the import bench generates: today's shape and the shapes an outsider would try.

Every shape has N lines, half of them re-deliveries of an earlier line's event (same key, same
payload and sourceTimestamp: a `duplicate`), so each decides N/2 `inserted` and N/2 `duplicate`.

* `today`: the bench's file of the earlier rounds: a re-delivery repeats the event of ~100 lines
  before (recent keys only), integer and ASCII payloads, one boot for every source;
* `spread`: the same events, but each re-delivery repeats an event drawn uniformly from the
  whole history so far (seeded), so its key is anywhere in the store's index;
* `outsider`: re-deliveries spread over the whole history, written as a second gateway would
  (the payload's keys in another order, `4` written `4.0` where the value is integral, the
  timestamp with an offset instead of `Z`); payloads hold floats and non-ASCII text; each source
  runs under several boots that alternate (so a key's bootId is one of three).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SHAPES = ("today", "spread", "outsider")
WORDS = ("Überdruck", "température haute", "压力过高", "Ölstand niedrig", "Normal")


def _today_event(k: int) -> dict[str, Any]:
    return {
        "source": f"PUMP-{k % 300:03d}/Trip",
        "transitionId": f"T{k}",
        "bootId": "B17",
        "sourceTimestamp": f"2026-04-22T08:{(k // 6000) % 60:02d}:{(k // 100) % 60:02d}.{k % 1000:03d}Z",
        "arrivalAt": "2026-04-22T09:00:00.000Z",
        "payload": {"state": "Trip" if k % 2 else "Normal", "severity": "High", "value": k % 97},
    }


def _outsider_event(k: int, again: bool) -> dict[str, Any]:
    """Event k; `again`: as a second gateway writes the same event (same meaning, other text)."""
    source = k % 300
    minute, second, ms = (k // 6000) % 60, (k // 100) % 60, k % 1000
    ts = f"2026-04-22T08:{minute:02d}:{second:02d}.{ms:03d}Z"
    if again:  # the same instant, written with an offset
        ts = f"2026-04-22T10:{minute:02d}:{second:02d}.{ms:03d}+02:00"
    level = 4 if k % 5 == 0 else round(20.0 + (k % 997) / 8.0 + 0.01 * (k % 7), 3)
    payload: dict[str, Any] = {
        "state": WORDS[k % len(WORDS)],
        "severity": "Hoch" if k % 3 else "Kritisch",
        "level": level,
        "ratio": (k % 101) / 7.0,
        "limits": [0.5, 99.5],
    }
    if again:
        payload = dict(reversed(payload.items()))
        if type(level) is int:
            payload["level"] = float(level)  # written 4.0: the same number in JSON's data model
    return {
        "source": f"KESSEL-{source:03d}/Druck",
        "transitionId": f"T{k}",
        "bootId": f"B{(k // 300) % 3}",  # a source's boots alternate
        "sourceTimestamp": ts,
        "arrivalAt": "2026-04-22T09:00:00.000Z",
        "payload": payload,
    }


def _lines(n: int, shape: str) -> Iterator[str]:
    rng = random.Random(27)
    fresh = 0
    for i in range(n):
        again = i % 2 == 1
        if shape == "today":
            k = max(0, i - 101) if again else i
            yield json.dumps(_today_event(k))
            continue
        if again:
            k = rng.randrange(fresh)  # any event recorded so far
        else:
            k, fresh = fresh, fresh + 1
        if shape == "spread":
            yield json.dumps(_today_event(k))
        else:
            yield json.dumps(_outsider_event(k, again), ensure_ascii=k % 2 == 0)


def write_shape(path: Path, n: int, shape: str) -> None:
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}")
    with path.open("w", encoding="utf-8") as f:
        for line in _lines(n, shape):
            f.write(line + "\n")


def write_file(path: Path, n: int) -> None:
    """Today's file (the shape the earlier rounds measured)."""
    write_shape(path, n, "today")
