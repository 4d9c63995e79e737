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

from agent.core.snapshot import _plain


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
