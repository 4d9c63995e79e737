"""Births, seq and bdSeq, records as metrics: judged by the independent Node.js host (Eclipse
Tahu's JavaScript codec) over a real Mosquitto (spec sparkplug.md sections 3, 4 and 6)."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest
from sparkplug_parts import Broker, Host, event_metrics
from sparkplug_scenario import GROUP, NODE, SITE, delivery, needs_parts, settings, start

from agent.store.store import Store

pytestmark = [needs_parts(), pytest.mark.timeout(90)]

PROPS = {"canonicalId", "source", "transitionId", "bootId", "identityBasis"}


def ms(ts: str) -> int:
    return int(datetime.fromisoformat(ts).timestamp() * 1000)


async def until(cond, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.05)


async def test_births_before_data_seq_timestamps_and_properties(
    broker: Broker, host: Host, sp_store: Store
) -> None:
    backlog = [delivery("PUMP-07/Trip", n, "B17", f"2026-04-22T08:00:{n:02d}.123Z") for n in range(1, 31)]
    await sp_store.record(backlog)
    run = await start(sp_store, settings(broker), (("PUMP-07", ("Trip", "Overload")),))
    try:
        await until(lambda: len(event_metrics(host.messages("DDATA"), "Events/Transition")) >= 30)
        live = [
            delivery("PUMP-07/Trip", n, "B17", f"2026-04-22T08:01:{n - 30:02d}.000Z") for n in range(31, 36)
        ]
        await sp_store.record(live)
        await until(lambda: len(event_metrics(host.messages("DDATA"), "Events/Transition")) >= 35)
        # a live row whose source time is not newer than the last one of its metric: historical
        await sp_store.record([delivery("PUMP-07/Trip", 36, "B17", "2026-04-22T08:00:59.000Z")])
        await until(lambda: len(event_metrics(host.messages("DDATA"), "Events/Transition")) >= 36)
    finally:
        await run.finish()
    await host.until(lambda e: e.get("verb") == "NDEATH")
    msgs = host.messages()
    verbs = [m["verb"] for m in msgs]
    assert verbs[0] == "NBIRTH" and verbs[1] == "DBIRTH"
    assert verbs.index("DDATA") > verbs.index("DBIRTH")
    assert verbs[-1] == "NDEATH"
    # seq: NBIRTH 0, then +1 per message of the edge node; NDEATH has none.
    seqs = [m["seq"] for m in msgs if m["verb"] != "NDEATH"]
    assert seqs == [i % 256 for i in range(len(seqs))]
    nbirth = msgs[0]
    by_name = {m["name"]: m for m in nbirth["metrics"]}
    assert by_name["bdSeq"]["type"] == "Int64" and by_name["bdSeq"]["value"] == 0
    assert (
        by_name["Node Control/Rebirth"]["type"] == "Boolean"
        and by_name["Node Control/Rebirth"]["value"] is False
    )
    assert {"Properties/Version", "Properties/Config Hash"} <= set(by_name)
    death = msgs[-1]
    assert [(m["name"], m["value"]) for m in death["metrics"]] == [("bdSeq", 0)]
    dbirth = msgs[1]
    assert dbirth["device"] == "PUMP-07" and dbirth["topic"] == f"spBv1.0/{GROUP}/DBIRTH/{NODE}/PUMP-07"
    declared = {m["name"]: m for m in dbirth["metrics"]}
    assert set(declared) == {
        "Trip/State",
        "Overload/State",
        "Device Info/Boot Id",
        "Events/Transition",
        "Events/BootObserved",
        "Events/Gap",
        "Events/Anomaly",
        "Events/IdentityIncomplete",
    }
    assert declared["Trip/State"]["value"] == "Tripped"  # the store's live state at birth
    assert declared["Overload/State"]["isNull"] is True
    assert declared["Device Info/Boot Id"]["value"] == "B17"
    # every metric of data is declared in the birth; timestamps are source times
    *events, late = event_metrics(host.messages("DDATA"), "Events/Transition")
    assert late["properties"]["canonicalId"]["value"] == "B17:36" and late["isHistorical"] is True
    assert all(m["declared"] for msg in host.messages("DDATA") for m in msg["metrics"])
    ids = [m["properties"]["canonicalId"]["value"] for m in events]
    assert ids == [f"B17:{n}" for n in range(1, 36)]
    for m, d in zip(events, backlog + live, strict=True):
        assert m["timestamp"] == ms(d.source_timestamp or "")
        assert set(m["properties"]) >= PROPS
        assert m["properties"]["source"]["value"] == f"{SITE}/PUMP-07/Trip"
        assert m["properties"]["transitionId"]["value"] == d.transition_id
        assert m["properties"]["bootId"]["value"] == "B17"
        assert m["properties"]["identityBasis"]["value"] == "counter"
        assert '"id":"' + m["properties"]["canonicalId"]["value"] + '"' in m["value"]
    # the backlog (pending at the births) is historical, the live rows are not
    assert [m["isHistorical"] for m in events] == [True] * 30 + [False] * 5
    # the bdSeq and seq of each attempt are kept in the store: the ones the host saw
    kept = await sp_store.db.execute_fetchall(
        "SELECT e.boot_id || ':' || e.transition_id, s.bd_seq, s.seq, s.attempt FROM sparkplug_sends s"
        " JOIN outbox o ON o.outbox_id = s.outbox_id JOIN events e ON e.canonical_id = o.ref_id"
        " WHERE o.kind = 'transition'"
    )
    saw = {(m["properties"]["canonicalId"]["value"], 0, m["seq"], 1) for m in [*events, late]}
    assert {tuple(r) for r in kept} == saw
    states = event_metrics(host.messages("DDATA"), "Trip/State")
    assert len(states) == 36 and all(s["value"] == "Tripped" for s in states)
