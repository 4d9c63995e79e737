"""The transition encoded straight from its claimed row (`transition_row_encoder`) is the same
Event, byte for byte, as the general writer (`encode_general`: not the row path, which `encode()`
now shares) over the entry the store builds from that row; where it cannot write a row it says so
(None) and `encode()` writes or refuses it."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.sinks.encode import EncodeError, encode_general, transition_row_encoder
from agent.store.outbox_head import Claimed

SITE, GW = "plant-1", "gw-line3"
STORE_ID = "6f1c2b9e-3d4a-4c5b-9e8f-0a1b2c3d4e5f"
TS = "2026-04-22T08:00:12.120Z"
ARRIVAL = "2026-04-22T08:00:12.180Z"


def row(
    source: str = "PUMP-07/Trip",
    tid: str = "T91",
    boot: str = "B17",
    ts: str | None = TS,
    payload: str = '{"severity":"High"}',
    arrival: str = ARRIVAL,
    basis: str | None = None,
    attempts: int = 0,
) -> tuple[Any, ...]:
    """A head-query row of a transition: kind NULL, basis NULL for `counter`."""
    return (41, None, attempts, 7, source, tid, boot, ts, payload, arrival, basis)


def both(r: tuple[Any, ...], site: str = SITE, gateway: str = GW, replayed: bool = False) -> tuple[Any, Any]:
    fast = transition_row_encoder(site, gateway, STORE_ID)(r, replayed)
    try:
        general: Any = encode_general(
            Claimed([r], {}).entry(r), site=site, gateway=gateway, replayed=replayed, store_id=STORE_ID
        )
    except EncodeError as exc:
        general = exc
    return fast, general


def test_the_common_row_is_encoded_from_the_row_as_encode_writes_it() -> None:
    fast, general = both(row(), replayed=True)
    assert fast is not None and fast == general
    assert type(fast) is type(general) and fast.body == general.body


def test_a_resent_row_says_its_attempt_and_the_basis_it_was_stored_with() -> None:
    for r in (row(attempts=4), row(basis="window", tid="w:Trip:1"), row(ts=None), row(basis="event_id")):
        fast, general = both(r)
        assert fast is not None and fast == general


def test_rows_that_need_escaping_or_a_site_outside_the_contract_are_left_to_encode() -> None:
    assert both(row(tid='T"1'))[0] is None
    assert both(row(boot="B\\17"))[0] is None
    assert both(row(arrival="2026\x00"))[0] is None
    assert both(row(ts="\n"))[0] is None
    fast, general = both(row(), site="plant 1")
    assert fast is None and isinstance(general, EncodeError)


def test_ids_that_need_percent_encoding_are_encoded_as_encode_does() -> None:
    for r in (
        row(tid="a:b"),
        row(boot="B 17"),
        row(tid="é"),
        row(source="PUMP 07/Över"),
        row(tid="a~b.c_d-e"),
    ):
        fast, general = both(r)
        assert fast is not None and fast == general


@settings(max_examples=400)
@given(
    source=st.sampled_from(["PUMP-07/Trip", "PUMP 07/Trip", "dev", "dev/", "a/b/c", "é/ü"]) | st.text(),
    tid=st.sampled_from(["T91", "42", "a:b", "w:Trip:5"]) | st.text(),
    boot=st.sampled_from(["B17", "x y"]) | st.text(),
    ts=st.none() | st.sampled_from([TS]) | st.text(),
    arrival=st.sampled_from([ARRIVAL]) | st.text(),
    basis=st.sampled_from([None, "event_id", "window"]) | st.text(),
    site=st.sampled_from([SITE, "bad site"]),
    gateway=st.sampled_from([GW, 'g"w']) | st.text(),
    attempts=st.integers(min_value=0, max_value=10**6),
    replayed=st.booleans(),
)
def test_the_row_path_writes_exactly_what_encode_writes_for_the_same_row(
    source: str,
    tid: str,
    boot: str,
    ts: str | None,
    arrival: str,
    basis: str | None,
    site: str,
    gateway: str,
    attempts: int,
    replayed: bool,
) -> None:
    r = row(source, tid, boot, ts, '{"n":1}', arrival, basis, attempts)
    fast, general = both(r, site, gateway, replayed)
    if isinstance(general, EncodeError):
        assert fast is None  # refused by encode(): the row path does not write it either
    else:
        assert fast is None or (fast == general and fast.body == general.body)


def test_a_source_seen_again_is_written_from_its_kept_parts() -> None:
    enc = transition_row_encoder(SITE, GW, STORE_ID)
    first = [enc(row(source=f"P-{n % 3}/Trip", tid=str(n)), False) for n in range(9)]
    again = [enc(row(source=f"P-{n % 3}/Trip", tid=str(n)), False) for n in range(9)]
    assert first == again
    assert [e.ce_source for e in first if e is not None][:3] == [
        "plant-1/P-0/Trip",
        "plant-1/P-1/Trip",
        "plant-1/P-2/Trip",
    ]
