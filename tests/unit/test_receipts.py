"""Receipts, the pure part (agent/core/receipts.py): ranges, bodies, what a gateway refuses, and the
receipts a committed batch owes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.core.receipts import (
    Receipt,
    ReceiptError,
    decode_receipt,
    encode_receipt,
    parse_outbox_ref,
    ranges,
    receipt_topic,
    receipts_for,
    topic_level,
)

STORE = "0f5e9c1a-3b2d-4c8e-9a7f-1234567890ab"
OTHER = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([], ()),
        ([7], ((7, 7),)),
        ([1, 2, 3], ((1, 3),)),
        ([5, 1, 2, 3, 3, 9], ((1, 3), (5, 5), (9, 9))),
        ([10, 12, 11, 14], ((10, 12), (14, 14))),
    ],
)
def test_ranges_fold_ids_into_closed_ascending_ranges(
    ids: list[int], expected: tuple[tuple[int, int], ...]
) -> None:
    assert ranges(ids) == expected


@given(st.lists(st.integers(min_value=1, max_value=10_000), max_size=300))
def test_ranges_hold_exactly_the_ids_and_a_body_round_trips(ids: list[int]) -> None:
    r = Receipt(STORE, ranges(ids), "ledger-1")
    assert r.ids() == sorted(set(ids))
    assert all(lo <= hi for lo, hi in r.ranges)
    assert all(a[1] + 1 < b[0] for a, b in zip(r.ranges, r.ranges[1:], strict=False)), "no two ranges touch"
    assert decode_receipt(encode_receipt(r)) == r


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"ranges": [[1, 2]]}', "`store`"),
        (json.dumps({"store": "gw-1", "ranges": []}).encode(), "`store`"),
        (json.dumps({"store": STORE}).encode(), "`ranges`"),
        (json.dumps({"store": STORE, "ranges": [[2, 1]]}).encode(), "a range"),
        (json.dumps({"store": STORE, "ranges": [[0, 1]]}).encode(), "a range"),
        (json.dumps({"store": STORE, "ranges": [[1, True]]}).encode(), "a range"),
        (json.dumps({"store": STORE, "ranges": [[1.0, 2]]}).encode(), "a range"),
        (json.dumps({"store": STORE, "ranges": [[1, 2, 3]]}).encode(), "a range"),
        (json.dumps({"store": STORE, "ranges": [[1, 2**63]]}).encode(), "a range"),
        (json.dumps({"store": STORE, "ranges": [[1, 2_000_000]]}).encode(), "more than 1,000,000"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_what_is_not_a_receipt_is_refused_with_the_reason(body: bytes, why: str) -> None:
    with pytest.raises(ReceiptError, match=why):
        decode_receipt(body)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (f"{STORE}:42", (STORE, 42)),
        (f"{STORE}:0", (STORE, 0)),
        (f"{STORE}:", None),
        (f"{STORE}:-1", None),
        (f"{STORE}:4x", None),
        ("gw-1:42", None),
        ("42", None),
        (None, None),
        (42, None),
        (f"{STORE.upper()}:42", None),
    ],
)
def test_an_outboxid_is_a_store_uuid_and_a_row_id(ref: object, expected: tuple[str, int] | None) -> None:
    assert parse_outbox_ref(ref) == expected


def test_a_committed_batch_owes_one_receipt_per_gateway_store() -> None:
    committed = [
        ("gw-1", f"{STORE}:3"),
        ("gw-1", f"{STORE}:1"),
        ("gw-1", f"{STORE}:2"),
        ("gw-2", f"{OTHER}:7"),
        ("gw-1", f"{OTHER}:9"),  # a gateway whose store was replaced: its own receipt
        ("gw-3", None),  # a sender that is not an edge-agent gateway: none
        ("gw-3", "not-an-outbox-ref"),
    ]
    got = {topic: decode_receipt(body) for topic, body in receipts_for(committed, "ledger-1")}
    assert got == {
        f"receipts/gw-1/{STORE}": Receipt(STORE, ((1, 3),), "ledger-1"),
        f"receipts/gw-2/{OTHER}": Receipt(OTHER, ((7, 7),), "ledger-1"),
        f"receipts/gw-1/{OTHER}": Receipt(OTHER, ((9, 9),), "ledger-1"),
    }


@pytest.mark.parametrize(
    ("name", "level"), [("gw-1", "gw-1"), ("a/b", "a-b"), ("#", "-"), ("+x", "-x"), ("", "-")]
)
def test_a_gateway_name_is_one_topic_level(name: str, level: str) -> None:
    assert topic_level(name) == level
    assert receipt_topic(name, STORE) == f"receipts/{level}/{STORE}"
