"""Sparkplug B payloads: the protobuf runtime (the agent's agent/sparkplug/payload.py over the
module protoc generates from sparkplug_b.proto) vs the hand-written codec the agent used before
issue 37 (bench/sparkplug_hand_codec.py), doing the same work. Prints ONE JSON line.

The work is the agent's own: outbox rows mapped by `agent.sparkplug.mapping` (transitions of 10
devices with the backlog bench's 200-character texts, a tenth without a source time, a tenth of
window basis, every other one historical) encoded as DDATA; NBIRTH and the DBIRTH of every
device (8 channels each) encoded; NCMDs (a host's `Node Control/Rebirth` true, a Tahu-written
payload of four metrics with properties, a command of another metric) decoded and judged for a
rebirth. The metrics are built before any clock starts (both sides encode the same objects);
the clock covers turning them into bytes (timestamp and seq included) or bytes into the rebirth
answer. Before the rounds, every payload is checked: both sides write the same bytes and give
the same answers. Rounds alternate (`--rounds`, default 3), medians.

    python bench/sparkplug_codec.py                      # 20,000 rows, 3 rounds
    python bench/sparkplug_codec.py --quick --rounds 2   # smoke
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import google.protobuf  # noqa: E402
from google.protobuf.internal import api_implementation  # noqa: E402

from agent.core.records import Entry, Transition  # noqa: E402
from agent.service.runtime import tuned_process  # noqa: E402
from agent.sparkplug import mapping  # noqa: E402
from agent.sparkplug import payload as pb  # noqa: E402
from agent.sparkplug.host import rebirth_requested  # noqa: E402
from bench import sparkplug_hand_codec as hand  # noqa: E402
from bench.rounds import alternate, median, ratio  # noqa: E402

SITE = "bench"
DEVICES = [f"PUMP-{d:02d}" for d in range(10)]
CHANNELS = tuple(f"Ch{c}" for c in range(8))
NOW = 1776844800000
# npm sparkplug-payload 1.0.3's encodePayload of four metrics (tests/unit/test_sparkplug_payload.py)
TAHU = bytes.fromhex(
    "08fb80d0a1db3312210a144e6f646520436f6e74726f6c2f52656269727468188080d0a1db33200b700112100a016e"
    "200458fbffffffffffffffff0112200a0173200c4a130a016b0a017a1205080c4201761204080410017a04c3a92f78"
    "120e0a0164200a69000000000000f83f1807"
)

Metrics = list[pb.Metric]


def rows(n: int) -> list[tuple[Metrics, bool]]:
    """The metrics of `n` transition rows (mapped as the forwarder maps them) and whether each
    goes as historical."""
    out = []
    declared = frozenset(f"{ch}{mapping.STATE_SUFFIX}" for ch in CHANNELS)
    for i in range(n):
        device, ch = DEVICES[i % len(DEVICES)], CHANNELS[i % len(CHANNELS)]
        ts = (
            None
            if i % 10 == 3
            else f"2026-04-22T08:{(i // 60000) % 60:02d}:{(i // 1000) % 60:02d}.{i % 1000:03d}Z"
        )
        state = ("Trip", "Run", "Stop")[i % 3]
        payload = json.dumps({"state": state, "severity": "High", "n": i, "text": "x" * 200})
        basis = "window" if i % 10 == 7 else "counter"
        t = Transition(i + 1, f"{device}/{ch}", str(i), "B17", ts, payload, "2026-04-22T08:00:00.000Z", basis)
        rm = mapping.row_metrics(
            Entry(i + 1, "transition", i + 1, 1, t),
            site=SITE,
            historical=False,
            declared=declared,
            gateway="gw-bench",
            store_id="bench-store",
        )
        out.append((rm.metrics, i % 2 == 0))
    return out


def births() -> list[Metrics]:
    """NBIRTH and the DBIRTH of every device (each channel with a current state)."""
    out = [mapping.node_birth(17, "0.1.0", "0123456789abcdef", NOW)]
    for d in DEVICES:
        states = tuple((ch, "Run", "2026-04-22T08:00:00.000Z") for ch in CHANNELS)
        out.append(
            mapping.device_birth(mapping.DeviceLive(d, states, "B17", "2026-04-22T07:59:00.000Z"), NOW)
        )
    return out


def commands() -> list[bytes]:
    b, s = pb.DataType.BOOLEAN, pb.DataType.STRING
    rebirth = pb.encode(pb.payload([pb.Metric(mapping.REBIRTH, b, True, NOW)]), NOW, 0)
    other = pb.encode(
        pb.payload([pb.Metric("Node Control/Next Server", b, True, NOW), pb.Metric("x", s, "y")]), NOW, 0
    )
    return [rebirth, TAHU, other]


def hand_rebirth(data: bytes) -> bool:
    """host.rebirth_requested's rule over the hand-written decoder (as the agent had it)."""
    ok = (pb.DataType.BOOLEAN, pb.DataType.STRING, pb.DataType.BYTES)
    return any(
        m.name == mapping.REBIRTH and m.value is True and m.type in ok for m in hand.decode(data).metrics
    )


def hand_ddata(work: list[tuple[Metrics, bool]]) -> list[bytes]:
    return [
        hand.encode_payload(NOW, i % 256, [hand.encode_metric(m, historical=h) for m in ms])
        for i, (ms, h) in enumerate(work)
    ]


def pb_ddata(work: list[tuple[Metrics, bool]]) -> list[bytes]:
    return [pb.encode(pb.payload(ms, historical=h), NOW, i % 256) for i, (ms, h) in enumerate(work)]


def hand_births(work: list[Metrics]) -> list[bytes]:
    return [hand.encode_payload(NOW, i, [hand.encode_metric(m) for m in ms]) for i, ms in enumerate(work)]


def pb_births(work: list[Metrics]) -> list[bytes]:
    return [pb.encode(pb.payload(ms), NOW, i) for i, ms in enumerate(work)]


def checked(ddata: list[tuple[Metrics, bool]], birth: list[Metrics], ncmds: list[bytes]) -> bool:
    """Both sides write the same bytes and read the same rebirth answers (else SystemExit)."""
    if hand_ddata(ddata) != pb_ddata(ddata) or hand_births(birth) != pb_births(birth):
        raise SystemExit("the two encoders wrote different bytes")
    answers = [rebirth_requested(c) for c in ncmds]
    if answers != [hand_rebirth(c) for c in ncmds] or answers != [True, True, False]:
        raise SystemExit(f"the two decoders disagree, or judge wrongly: {answers}")
    return True


def timed(fn: Callable[[], Any], ops: int) -> float:
    t0 = time.perf_counter()
    fn()
    return ops / (time.perf_counter() - t0)


def side(
    ddata: list[tuple[Metrics, bool]], birth: list[Metrics], ncmds: list[bytes], reps: int, agent: bool
) -> dict[str, float]:
    """One round of one side: DDATA, births and NCMDs per second."""
    enc_d, enc_b = (pb_ddata, pb_births) if agent else (hand_ddata, hand_births)
    judge = rebirth_requested if agent else hand_rebirth
    return {
        "ddata": timed(lambda: enc_d(ddata), len(ddata)),
        "birth": timed(lambda: [enc_b(birth) for _ in range(reps)], reps * len(birth)),
        "ncmd": timed(lambda: [judge(c) for _ in range(reps * 10) for c in ncmds], reps * 10 * len(ncmds)),
    }


def main(n: int, reps: int, rounds: int) -> dict[str, Any]:
    ddata, birth, ncmds = rows(n), births(), commands()
    same = checked(ddata, birth, ncmds)
    with tuned_process():
        a, b = alternate(
            rounds,
            lambda: side(ddata, birth, ncmds, reps, True),
            lambda: side(ddata, birth, ncmds, reps, False),
        )
    out: dict[str, Any] = {
        "bench": "sparkplug_codec",
        "rows": n,
        "rounds": rounds,
        "protobuf": google.protobuf.__version__,
        "backend": api_implementation.Type(),
        "same_bytes_and_answers": same,
        "ddata_bytes_median": sorted(len(x) for x in pb_ddata(ddata[:1000]))[min(len(ddata), 1000) // 2],
    }
    for kind in ("ddata", "birth", "ncmd"):
        pa, ha = [r[kind] for r in a], [r[kind] for r in b]
        out[f"{kind}_per_s"] = round(median(pa))
        out[f"hand_{kind}_per_s"] = round(median(ha))
        out[f"{kind}_us"] = round(1e6 / median(pa), 2)
        out[f"hand_{kind}_us"] = round(1e6 / median(ha), 2)
        out[f"{kind}_vs_hand"] = ratio(pa, ha)
    out["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="2,000 rows (a smoke run)")
    args = p.parse_args()
    n = 2_000 if args.quick else args.rows
    print(json.dumps(main(n, max(1, n // 200), args.rounds)))
