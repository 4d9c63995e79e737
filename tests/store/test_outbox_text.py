"""A transition whose event text SQLite writes in the head query (`TransitionText`): the bytes
upstream are exactly the general writer's, and the store takes that path exactly when its ids
need no percent-encoding and its timestamps are in the normal form (the common form).
Real store file, real head query, generated records."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.core.contract import ContractError
from agent.core.records import Entry, Transition, TransitionText
from agent.sinks import encode as encode_module
from agent.sinks.encode import EncodeError, Event, encode
from agent.store.store import Store

AT = "2026-04-22T08:00:12.180Z"
GW = "gw-line3"

_odd = st.sampled_from(
    ["", "é", "ü/x", 'a"b', "a\\b", "a\x00b", "\x1f", "\x7f", "\u2028", "x y", "a:b", "~._-"]
)
_text = st.text(max_size=12) | _odd
_NORMAL = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")
_stamp = (
    st.sampled_from([AT, "2026-04-22T08:00:12.120Z"])
    | st.builds(
        lambda t, cut, tail: t[:cut] + tail,
        st.sampled_from([AT, "0000-00-00T00:00:00.000Z", "2026-04-22T08:00:12.12\u0663Z"]),
        st.integers(min_value=0, max_value=24),
        st.sampled_from(["", "Z", "\x00", '"', "\\", "\x01", "é", "0"]),
    )
    | _text
)


def _general(rec: Transition, oid: int, attempt: int, site: str, replayed: bool) -> Event:
    """The event of `rec` through the JSON encoder (`_body_general`)."""
    parts = encode_module._transition(rec, site)
    body = encode_module._body_general(parts, GW, attempt, replayed).encode()
    return Event(oid, parts.source, parts.id, parts.type, "transition", parts.device, parts.channel, body)


def test_the_text_sqlite_writes_is_exactly_the_general_event(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with asyncio.Runner() as runner:
        store = runner.run(Store.open(path))
        runner.run(store.register_upstreams([("up", "none")], AT))
        con = sqlite3.connect(path, isolation_level=None)
        seen = {True: 0, False: 0}
        try:

            @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
            @given(
                source=st.sampled_from(["PUMP-07/Trip", "dev", "é/ü", "a b/c"])
                | st.text(min_size=1, max_size=8),
                tid=st.sampled_from(["T91", "42"]) | _text,
                boot=st.sampled_from(["B17"]) | _text,
                ts=st.none() | _stamp,
                arrival=_stamp,
                basis=st.sampled_from(["counter", "event_id", "window"]),
                payload=st.sampled_from(['{"n":1}', '{"t":"é\\"\\\\\\u0001"}', "[]", '"\u2028"']),
                site=st.sampled_from(["plant-1", "bad site"]),
                attempts=st.integers(min_value=0, max_value=5),
                replayed=st.booleans(),
            )
            def check(
                source: str,
                tid: str,
                boot: str,
                ts: str | None,
                arrival: str,
                basis: str,
                payload: str,
                site: str,
                attempts: int,
                replayed: bool,
            ) -> None:
                con.execute("DELETE FROM outbox")
                con.execute("DELETE FROM events")
                cid = con.execute(
                    "INSERT INTO events(source, transition_id, boot_id, device, source_ts, payload, payload_hash,"
                    " first_arrival, last_arrival, first_arrival_id, identity_basis)"
                    " VALUES (?, ?, ?, 'd', ?, ?, 'h', ?, ?, 1, ?)",
                    (source, tid, boot, ts, payload, arrival, arrival, basis),
                ).lastrowid
                oid = con.execute(
                    "INSERT INTO outbox(upstream, kind, ref_id, attempts, created_at) VALUES ('up', 'transition', ?, ?, ?)",
                    (cid, attempts, AT),
                ).lastrowid
                assert cid is not None and oid is not None
                [claimed] = runner.run(store.outbox.claim("up", 10))
                assert con.execute("SELECT attempts FROM outbox").fetchall() == [(attempts + 1,)]
                assert claimed.attempt == attempts + 1
                rec = Transition(cid, source, tid, boot, ts, payload, arrival, basis)
                fast = (
                    bool(encode_module._UNRESERVED.fullmatch(boot + tid))
                    and bool(_NORMAL.fullmatch(arrival))
                    and (ts is None or bool(_NORMAL.fullmatch(ts)))
                )
                seen[fast] += 1
                if fast:
                    assert type(claimed.record) is TransitionText
                else:
                    assert claimed.record == rec
                as_record = Entry(oid, "transition", cid, attempts + 1, AT, rec)
                try:
                    general = _general(rec, oid, attempts + 1, site, replayed)
                except ContractError as exc:  # the general path refuses it: so must this one, same words
                    for e in (claimed, as_record):
                        try:
                            encode(e, site=site, gateway=GW, replayed=replayed, store_id="s")
                        except EncodeError as refused:
                            assert str(refused) == f"outbox row {oid}: {exc}"
                        else:
                            raise AssertionError("encoded what the general path refuses") from exc
                    return
                assert encode(claimed, site=site, gateway=GW, replayed=replayed, store_id="s") == general
                assert encode(as_record, site=site, gateway=GW, replayed=replayed, store_id="s") == general

            check()
            assert seen[True] and seen[False]  # both paths were taken
        finally:
            con.close()
            runner.run(store.close())


async def test_a_claimed_transition_whose_record_is_gone_has_none(store: Store) -> None:
    await store.register_upstreams([("up", "none")], AT)
    con = sqlite3.connect(store.path, isolation_level=None)
    con.execute(
        "INSERT INTO outbox(upstream, kind, ref_id, created_at) VALUES ('up', 'transition', 99, ?)", (AT,)
    )
    con.close()
    [claimed] = await store.outbox.claim("up", 10)
    assert claimed.record is None
