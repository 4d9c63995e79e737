"""A delivery's evidence as strict JSON (`agent.core.snapshot._plain`): the fast path by exact
type gives exactly what the general rules give, for every shape a read can take."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.snapshot import _plain, evidence_of, evidence_reference


def reference(value: Any) -> Any:
    """The rules as first written: NaN and Inf as text, mappings as dicts with text keys,
    lists and tuples as lists, anything else as is."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): reference(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [reference(v) for v in value]
    return value


class Level(IntEnum):
    LOW = 1


class Ratio(float):
    pass


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.just(Level.LOW),
    st.sampled_from([Ratio(1.5), Ratio(math.inf), Ratio(math.nan)]),
)
keys = st.one_of(st.text(max_size=4), st.integers(-3, 3), st.booleans())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(keys, inner, max_size=4),
        st.dictionaries(keys, inner, max_size=4).map(OrderedDict),
        st.dictionaries(keys, inner, max_size=4).map(MappingProxyType),
    ),
    max_leaves=20,
)


def dumped(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"), allow_nan=False)


@settings(max_examples=500, deadline=None)
@given(values)
def test_the_fast_path_gives_what_the_general_rules_give(value: Any) -> None:
    fast, slow = _plain(value), reference(value)
    assert dumped(fast) == dumped(slow)
    assert type(fast) is type(slow)


# What a register read's evidence is made of, with the edges of orjson's writer: control
# characters, DEL, quotes, backslashes, non-ASCII text, integers beyond 64 bits.
texts = st.one_of(
    st.text(max_size=6),
    st.text(alphabet=st.sampled_from(['"', "\\", "\x7f", "\x00", "\n", "\u2028", "é", "/", "a"]), max_size=6),
)
simple_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=2**63 - 2, max_value=2**64 + 2), texts
)
evidence_like = st.recursive(
    simple_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(texts, inner, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=1000, deadline=None)
@given(st.one_of(evidence_like, values))
def test_evidence_of_is_the_reference(value: Any) -> None:
    raw = {"read": value, "boot": {"value": "12", "register": 0, "table": "holding"}}
    fast, fast_text = evidence_of(raw)
    slow, slow_text = evidence_reference(raw)
    assert fast_text == slow_text
    assert fast_text == dumped(reference(raw))
    assert dumped(fast) == dumped(slow)
    assert type(fast["read"]) is type(slow["read"])


def test_evidence_of_a_register_read() -> None:
    raw = {
        "read": {"state": {"register": 4, "registers": [1]}, "flags": ["state 7 has no configured name"]},
        "boot": {"value": "12", "register": 0, "table": "holding"},
    }
    assert evidence_of(raw) == evidence_reference(raw)
    assert evidence_of(raw)[1] == (
        '{"boot":{"register":0,"table":"holding","value":"12"},'
        '"read":{"flags":["state 7 has no configured name"],"state":{"register":4,"registers":[1]}}}'
    )
