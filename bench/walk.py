"""The walk of one record to each upstream: the modules of `agent/` its code runs through, from the
claimed outbox row to the bytes handed to the network client, and how many times the call climbs
back from one module into another (issue 37's "rooms and climbs").

Prints ONE JSON line. Each walk runs the product's own functions on one stored record (a
transition, a boot), traced with `sys.setprofile`: MQTT and HTTP the forwarder's `_encode` of
the claimed row and the sink's message (`MqttSink._messages`; `batch_idempotency_key` and
`batch_body` for HTTP), Sparkplug `SparkplugForwarder._publish_row` with its `Session.publish`
(paho stood in for). A module is one `agent/` file, a room its folder; a climb is an arrow walked
back, a return from a function of one module into a caller of another (`climbs`: each pair of
modules once; `returns`: every such return). The claim itself (the store) is the same
for every upstream and is left out.

    python bench/walk.py
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import Any

from agent.core.records import BootObserved, Entry, Transition
from agent.service.forwarder import Forwarder
from agent.sinks.encode import Event, batch_body, transition_row_encoder
from agent.sinks.http import batch_idempotency_key
from agent.sinks.mqtt import MqttSink
from agent.sparkplug.forwarder import SparkplugForwarder
from agent.sparkplug.session import Session
from agent.store.outbox_head import Claimed

AGENT = Path(__file__).resolve().parents[1] / "agent"
SITE, GW, STORE_ID = "plant-1", "gw-line3", "6f1c2b9e-3d4a-4c5b-9e8f-0a1b2c3d4e5f"
TS, ARRIVAL = "2026-04-22T08:00:12.120Z", "2026-04-22T08:00:12.180Z"
TRANSITION_ROW = (41, None, 0, 7, "PUMP-07/Trip", "T91", "B17", TS, '{"state":"Tripped"}', ARRIVAL, None)
BOOT = BootObserved(3, "PUMP-07", "B18", "B17", ARRIVAL, TS, True, '{"reason":"boot id changed"}')


def _module(frame: FrameType | None) -> str | None:
    """The `agent/` file of a frame, relative (None: not ours)."""
    if frame is None:
        return None
    path = Path(frame.f_code.co_filename)
    return str(path.relative_to(AGENT)) if path.is_relative_to(AGENT) else None


def _ours_above(frame: FrameType | None) -> str | None:
    while frame is not None:
        if (mod := _module(frame)) is not None:
            return mod
        frame = frame.f_back
    return None


def traced(run: Callable[[], Any]) -> dict[str, Any]:
    """Run `run()` under the profiler: the modules entered, in order, and the climbs back."""
    rooms: list[str] = []
    returns = 0
    climbs: set[tuple[str, str]] = set()

    def profile(frame: FrameType, event: str, _: Any) -> None:
        nonlocal returns
        mod = _module(frame)
        if mod is None or event not in ("call", "return"):
            return
        if event == "call" and mod not in rooms:
            rooms.append(mod)
        elif event == "return" and (caller := _ours_above(frame.f_back)) is not None and caller != mod:
            returns += 1
            climbs.add((mod, caller))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return {
        "modules": len(rooms),
        "rooms": len({r.split("/")[0] for r in rooms}),
        "climbs": len(climbs),
        "returns": returns,
        "walk": rooms,
        "climbs_back": sorted(f"{a} -> {b}" for a, b in climbs),
    }


_ENCODER = transition_row_encoder(SITE, GW, STORE_ID)  # the forwarder's, made once at its start


def _forwarder() -> SimpleNamespace:
    return SimpleNamespace(
        _outage=False, _replay_until=0, site=SITE, gateway=GW, store_id=STORE_ID, _encode_row=_ENCODER
    )


def _events(claimed: Claimed) -> list[Event]:
    flight = asyncio.run(Forwarder._encode(_forwarder(), claimed))  # type: ignore[arg-type]
    return list(flight.events)


def mqtt(claimed: Claimed) -> None:
    settings = SimpleNamespace(batch_size=1, topic="{site}/{device}/{channel}/{type}")
    MqttSink._messages(SimpleNamespace(settings=settings, site=SITE), _events(claimed))  # type: ignore[arg-type]


def http(claimed: Claimed) -> None:
    events = _events(claimed)
    batch_idempotency_key(events)
    batch_body(events)


def sparkplug(entry: Entry) -> None:
    class Paho:
        def publish(self, *_: Any) -> Any:
            return SimpleNamespace(rc=0)

    async def walk() -> None:
        lost = asyncio.get_running_loop().create_future()
        session = SimpleNamespace(lost=lost, seq=0, paho=Paho(), group="g", node="n", _unwritten=0)
        session._writable = asyncio.Event()
        session.publish = lambda *a, **k: Session.publish(session, *a, **k)  # type: ignore[arg-type]
        fwd = SimpleNamespace(site=SITE, gateway=GW, store_id=STORE_ID, _dead=set(), _mark=0, _last_ms={})
        fwd._birthed = {"PUMP-07": frozenset({"Trip/State"})}
        await SparkplugForwarder._publish_row(fwd, session, entry)  # type: ignore[arg-type]

    asyncio.run(walk())


def main() -> None:
    transition = Claimed([TRANSITION_ROW], {})
    t = Transition(7, *TRANSITION_ROW[4:10], "counter")
    boot_row = (42, "boot_observed", 0, 3)
    boot = Claimed([boot_row], {"boot_observed": {3: dataclasses.astuple(BOOT)}})  # as the store reads it
    for warm in (transition, boot):  # imports and caches (`lru_cache`d sources) out of the walk
        mqtt(warm), http(warm)
    out: dict[str, Any] = {"bench": "walk"}
    out["mqtt"] = {"transition": traced(lambda: mqtt(transition)), "boot": traced(lambda: mqtt(boot))}
    out["http"] = {"transition": traced(lambda: http(transition)), "boot": traced(lambda: http(boot))}
    sp_t, sp_b = Entry(41, "transition", 7, 1, t), Entry(42, "boot_observed", 3, 1, BOOT)
    sparkplug(sp_t), sparkplug(sp_b)
    out["sparkplug"] = {
        "transition": traced(lambda: sparkplug(sp_t)),
        "boot": traced(lambda: sparkplug(sp_b)),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
