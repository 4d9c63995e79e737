"""Our canonical JSON against an independent RFC 8785 implementation (the `rfc8785` package).

Inside the range where the two agree by design (integers below 2**53 in magnitude; our one
deviation writes larger integers exactly, see `agent.core.jcs`), every JSON value must come
out byte for byte the same, through the fast path for flat objects and the general writer.
"""

from __future__ import annotations

from typing import Any

import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.jcs import canonical_json, canonical_json_general

SAFE = 2**53 - 1
text = st.text(st.characters(exclude_categories=("Cs",)))  # lone surrogates are refused by both
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-SAFE, max_value=SAFE)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300)
@given(json_values)
def test_canonical_json_is_rfc8785(value: Any) -> None:
    expected = rfc8785.dumps(value).decode("utf-8")
    assert canonical_json(value) == expected
    assert canonical_json_general(value) == expected


@given(st.dictionaries(text, scalars, max_size=8))
def test_flat_payloads_are_rfc8785(d: dict[str, Any]) -> None:
    assert canonical_json(d) == rfc8785.dumps(d).decode("utf-8")


@given(st.dictionaries(text, scalars | st.integers(), max_size=8))
def test_flat_payloads_with_any_integer_take_the_general_writers_form(d: dict[str, Any]) -> None:
    # Beyond 2**53 our writer keeps integers exact (its one deviation): the fast paths
    # (orjson up to 64 bits, then the general writer) must write what the general writer writes.
    assert canonical_json(d) == canonical_json_general(d)


floats = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=300)
@given(
    st.dictionaries(
        text,
        floats | text | st.integers(min_value=-SAFE, max_value=SAFE) | st.lists(floats | text, max_size=4),
        max_size=8,
    )
)
def test_payloads_with_floats_nesting_and_non_ascii_are_rfc8785(d: dict[str, Any]) -> None:
    # The shape a gateway's payload often has: what the C-encoder fast path (`_nested_fast`) takes.
    assert canonical_json(d) == rfc8785.dumps(d).decode("utf-8")
