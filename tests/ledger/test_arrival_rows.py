"""The arrivals' COPY text: the writer that formats a row in one piece gives the bytes of the
writer that formats it value by value (`_cell`, which escapes every text), for any text."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from copy_oracle import copy_text_by_cell
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.contract import Decision
from agent.core.decide import Outcome
from agent.core.intake import parse_delivery
from agent.ledger import arrival_rows
from agent.ledger.arrivals import Arrival, Received, import_key

NOW = datetime(2026, 4, 22, 8, 0, 0, 123456, tzinfo=UTC)
# text the COPY format must escape, beside plain and non-ASCII text and a lone surrogate
texts = st.text(
    alphabet=st.sampled_from(["a", "B", "7", "/", "\t", "\n", "\r", "\\", "N", "ü", "压", "\udc80"])
)
maybe_texts = st.none() | texts


@st.composite
def items(draw: st.DrawFn) -> Arrival:
    line = draw(st.none() | st.integers(1, 10**6))
    kind = draw(st.sampled_from(["delivery", "incomplete", "rejected", "bytes", "received"]))
    if kind == "received":
        item: object = Received(
            draw(st.sampled_from(["boot_observed", "gap", "anomaly", "identity_incomplete"])),
            draw(texts),
            draw(texts),
            draw(maybe_texts),
            draw(st.none() | st.just("2026-04-22T08:00:00.000Z")),
            "2026-04-22T08:00:01.000Z",
            draw(st.binary() | texts),
            line,
        )
    elif kind == "rejected":
        item = parse_delivery(
            "{" + draw(texts), arrival_at="2026-04-22T08:00:01.000Z", receiver="r", line=line
        )
    elif kind == "bytes":
        item = parse_delivery(
            b"\xff" + draw(st.binary()), arrival_at="2026-04-22T08:00:01.000Z", receiver="r"
        )
    else:
        obj = {
            "source": draw(texts) + "/x",
            "transitionId": draw(texts) if kind == "delivery" else None,
            "bootId": draw(texts),
            "sourceTimestamp": draw(st.none() | st.just("2026-04-22T10:00:00.5+02:00")),
            "payload": {draw(texts): draw(texts)},
        }
        item = parse_delivery(
            json.dumps(obj, ensure_ascii=draw(st.booleans())),
            arrival_at="2026-04-22T08:00:01.000Z",
            receiver="r",
            line=line,
        )
    return Arrival(
        item,  # type: ignore[arg-type]
        draw(texts),
        draw(st.sampled_from(["mqtt", "http", "import"])),
        draw(st.none() | st.integers(1, 99)),
        draw(st.none() | st.booleans()),
        draw(maybe_texts),
    )


outcomes = st.builds(
    Outcome,
    st.sampled_from(list(Decision)),
    st.none() | st.integers(1, 10**9),
    st.none() | st.integers(1, 10**9),
    maybe_texts,
    st.lists(st.sampled_from(["payload_pruned", "window_key", "refresh"]), max_size=2).map(tuple),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(items(), outcomes), max_size=8))
def test_the_copy_text_is_the_value_by_value_text(rows: list[tuple[Arrival, Outcome]]) -> None:
    batch = [a for a, _ in rows]
    ocs = [o for _, o in rows]
    ids = list(range(1, len(rows) + 1))
    keys = [import_key("f" * 64, n) for n in ids]
    got = arrival_rows.copy_text(batch, ocs, ids, keys, NOW)
    assert got == copy_text_by_cell(batch, ocs, ids, keys, NOW)
