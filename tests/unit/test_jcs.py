"""Canonical JSON (RFC 8785): the form the payload hash is taken over."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.core.jcs import CanonicalJsonError, canonical_json, canonical_json_general, format_number


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(0.0, "0", id="zero"),
        pytest.param(-0.0, "0", id="negative zero is zero"),
        pytest.param(1.0, "1", id="an integral double has no fraction"),
        pytest.param(1e21, "1e+21", id="1e21 switches to exponent form"),
        pytest.param(1e20, "100000000000000000000", id="1e20 is written out"),
        pytest.param(1e-7, "1e-7", id="small numbers use exponent form"),
        pytest.param(1e-6, "0.000001", id="1e-6 is still written out"),
        pytest.param(123.456, "123.456", id="plain fraction"),
        pytest.param(5e-324, "5e-324", id="smallest subnormal"),
        pytest.param(1.7976931348623157e308, "1.7976931348623157e+308", id="largest double"),
        pytest.param(333333333.33333329, "333333333.3333333", id="shortest round-trip digits"),
        pytest.param(-1.5e-7, "-1.5e-7", id="negative with exponent"),
    ],
)
def test_numbers_follow_ecmascript(value: float, text: str) -> None:
    assert format_number(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param({"b": 1, "a": 2}, '{"a":2,"b":1}', id="keys sorted, no whitespace"),
        pytest.param(
            {"\u20ac": 1, "\U0001f600": 2, "\ufb01": 3},
            '{"€":1,"😀":2,"ﬁ":3}',
            id="keys sorted by UTF-16 units",
        ),
        pytest.param('a"b\\c\n\x01', '"a\\"b\\\\c\\n\\u0001"', id="escapes as JSON requires, lowercase hex"),
        pytest.param("é\u2028", '"é\u2028"', id="non-ASCII stays literal"),
        pytest.param([1, 1.0, True, None], "[1,1,true,null]", id="array of scalars"),
        pytest.param(2**64 - 1, "18446744073709551615", id="64-bit integers stay exact"),
    ],
)
def test_canonical_form(value: Any, text: str) -> None:
    assert canonical_json(value) == text


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(math.nan, id="NaN"),
        pytest.param(math.inf, id="Infinity"),
        pytest.param("\ud800", id="a lone surrogate"),
        pytest.param({1: "x"}, id="a non-text key"),
        pytest.param(object(), id="not a JSON value"),
    ],
)
def test_values_without_canonical_form_are_refused(value: Any) -> None:
    with pytest.raises(CanonicalJsonError):
        canonical_json(value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_canonical_form_is_a_fixed_point_of_parsing(value: Any) -> None:
    text = canonical_json(value)
    assert canonical_json(json.loads(text)) == text


@given(st.dictionaries(st.text(), st.integers(), min_size=2, max_size=6))
def test_key_order_never_changes_the_form(d: dict[str, int]) -> None:
    reversed_d = dict(reversed(list(d.items())))
    assert canonical_json(d) == canonical_json(reversed_d)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_numbers_round_trip(x: float) -> None:
    assert float(canonical_json(x)) == x


flat_values = st.none() | st.booleans() | st.integers() | st.text()


@given(st.dictionaries(st.text(), flat_values, max_size=8))
def test_the_fast_path_for_flat_objects_equals_the_general_writer(d: dict[str, object]) -> None:
    try:
        general = canonical_json_general(d)
    except CanonicalJsonError:
        with pytest.raises(CanonicalJsonError):
            canonical_json(d)
        return
    assert canonical_json(d) == general


@pytest.mark.parametrize(
    ("value", "fast"),
    [
        ({"level": 20.125, "état": "Überdruck", "limits": [0.5, 99.5], "n": 4.0}, True),
        ({"a": {"b": [1, 2.5, None, True]}}, True),
        ({"x": 1e21}, False),  # repr has an exponent: the general writer
        ({"x": 1e-7}, False),
        ({"x": 2.0**53}, False),  # integral beyond 2**53: repr would add .0
        ({"\U0001f600": 1, "\ue000": 2}, False),  # UTF-16 order differs from code points
        ({"w": "\ud800"}, False),  # a lone surrogate: refused by the general writer
    ],
)
def test_the_c_encoder_path_takes_floats_and_nesting_but_not_what_it_would_write_otherwise(
    value: dict[str, Any], fast: bool
) -> None:
    from agent.core.jcs import _nested_fast

    got = _nested_fast(value)
    assert (got is not None) == fast
    if got is not None:
        assert got == canonical_json_general(value)
