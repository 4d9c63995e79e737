"""The forwarder's encode of claimed rows (a transition from its row, every other row from its
entry) against the general writer (`encode_general`) over the same stored rows' entries, on a
real SQLite file: the same events and bytes, the same refusals."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from agent.config.upstreams import HttpUpstream
from agent.core.contract import Delivery
from agent.core.intake import parse_delivery
from agent.service.forwarder import Forwarder
from agent.sinks.encode import EncodeError, Event, encode_general
from agent.store.store import Store

SITE, GW, UP = "plant-1", "gw-test", "central"
AT = "2026-04-22T08:00:00.000Z"

ODD = [  # (source, transition_id, boot_id, source_ts, identity_basis): rows the row path leaves to encode()
    ("PUMP-07/Trip", 'T"1', "B17", AT, "counter"),
    ("PUMP-07/Trip", "T\\2", "B17", AT, "counter"),
    ("PUMP-07/Trip", "T3", "B\x0017", AT, "event_id"),
    ("PUMP-07/Trip", "T4", "B17", "2026\n04", "window"),
    ("PUMP-07/Trip", "T5", "B17", None, "counter"),  # NULL timestamp: no `time`
    ("PUMP 07/Över", "a:b", "B 17", AT, "window"),  # percent-encoded source and id
    ("PUMP-07/Trip", "é\u2028", "B17", AT, "counter"),
]


def d(tid: str) -> Delivery:
    obj = {"source": "PUMP-07/Trip", "transitionId": tid, "bootId": "B17", "payload": {"n": tid}}
    got = parse_delivery(json.dumps(obj), arrival_at=AT, receiver="test")
    assert isinstance(got, Delivery)
    return got


class NoPrepare:
    """A sink the forwarder hands events to unchanged (nothing made ahead)."""

    name = UP
    overlapping = False


async def test_the_forwarder_encodes_every_stored_row_as_encode_does(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = await Store.open(path)
    await store.register_upstreams([(UP, "none")], AT)
    await store.record([d(str(n)) for n in range(20)])  # 20 transitions and the boot observed
    with sqlite3.connect(path) as con:
        first = con.execute("SELECT max(first_arrival_id) FROM events").fetchone()[0]
        for n, (source, tid, boot, ts, basis) in enumerate(ODD):
            cur = con.execute(
                "INSERT INTO events(source, transition_id, boot_id, device, source_ts, payload, payload_hash,"
                " first_arrival, last_arrival, first_arrival_id, identity_basis) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (source, tid, boot, source.split("/")[0], ts, '{"odd":1}', f"h{n}", AT, AT, first, basis),
            )
            con.execute(
                "INSERT INTO outbox(upstream, kind, ref_id, created_at) VALUES (?, 'transition', ?, ?)",
                (UP, cur.lastrowid, AT),
            )
        for kind in ("transition", "gap", "boot_observed"):  # records that are gone
            con.execute(
                "INSERT INTO outbox(upstream, kind, ref_id, created_at) VALUES (?, ?, 999999, ?)",
                (UP, kind, AT),
            )
        con.execute("UPDATE outbox SET attempts = 2 WHERE outbox_id % 5 = 0")  # resent: attempt 3
    fwd = Forwarder(store, NoPrepare(), HttpUpstream(UP, "http://127.0.0.1:9"), site=SITE, gateway=GW)  # type: ignore[arg-type]
    fwd._replay_until = 10  # rows up to 10 waited in the backlog: replayed
    claimed = await store.outbox.claim_rows(UP, 1000)
    flight = await fwd._encode(claimed)
    await store.close()

    entries = list(claimed)
    assert len(entries) == 20 + 1 + len(ODD) + 3
    expected: list[Event] = []
    refused: list[int] = []
    for i, e in enumerate(entries):
        replayed = e.attempt > 1 or e.outbox_id <= 10
        try:
            expected.append(
                encode_general(e, site=SITE, gateway=GW, replayed=replayed, store_id=store.store_id)
            )
        except EncodeError:
            refused.append(i)
    assert flight.ids == [e.outbox_id for e in entries]
    assert flight.events == expected
    assert [ev.body for ev in flight.events] == [ev.body for ev in expected]
    assert all(type(ev) is Event for ev in flight.events)
    assert refused == [i for i, oc in enumerate(flight.outcomes) if oc is not None]
    assert len(refused) == 3  # the three records that are gone, dead-lettered with encode()'s reason
    assert {e.kind for e in entries} == {"transition", "boot_observed", "gap"}
    assert sum(1 for ev in expected if ev.ce_id.startswith("B%2017")) == 1
