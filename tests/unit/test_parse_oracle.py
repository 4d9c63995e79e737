"""The JSON reader of a delivery against Python's json: the same value, or the same refusal.

`agent.core.intake.decode_json` reads through orjson where orjson gives what Python's json
gives and through Python's json everywhere else (integers beyond 64 bits, lone surrogates,
numbers beyond the double range, anything orjson refuses). What comes out must be Python's
json's own value, type and key order included, and what it refuses must be refused with
Python's json's own message.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.intake import decode_json


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_PYTHON = json.JSONDecoder(parse_constant=_no_constants)


def _typed(v: Any) -> Any:
    """A value with every type and key order made visible (1 == 1.0 == True in Python)."""
    if isinstance(v, dict):
        return ("dict", [(k, _typed(x)) for k, x in v.items()])
    if isinstance(v, list):
        return ("list", [_typed(x) for x in v])
    if isinstance(v, float):
        return ("float", v.hex())
    return (type(v).__name__, v)


def _same(text: str) -> None:
    try:
        expected: Any = ("ok", _typed(_PYTHON.decode(text)))
    except ValueError as exc:
        expected = ("error", str(exc))
    try:
        got: Any = ("ok", _typed(decode_json(text)))
    except ValueError as exc:
        got = ("error", str(exc))
    assert got == expected


# Numbers as JSON spells them: any integer (far beyond 64 bits), fractions and exponents.
_digits = st.text("0123456789", min_size=1, max_size=30)
numbers = st.builds(
    lambda sign, whole, frac, exp: (
        sign + whole.lstrip("0").rjust(1, "0") + (f".{frac}" if frac else "") + (exp or "")
    ),
    st.sampled_from(["", "-"]),
    _digits,
    st.none() | _digits,
    st.none()
    | st.builds(lambda e, s, d: e + s + d, st.sampled_from("eE"), st.sampled_from(["", "+", "-"]), _digits),
)
text = st.text(st.characters(codec="utf-8"))  # lone surrogates written as escapes below
scalar_texts = (
    numbers
    | st.integers().map(str)
    | st.floats(allow_nan=False).map(repr).map(lambda r: r.replace("inf", "1e999"))
    | text.map(lambda s: json.dumps(s, ensure_ascii=False))
    | text.map(json.dumps)
    | st.sampled_from(
        ['"\\ud800"', '"\\udc00x"', '"\\ud83d\\ude00"', "true", "false", "null", "NaN", "-Infinity"]
    )
)
keys = st.sampled_from(["a", "b", "source", "payload", "é", ""]) | text
json_texts = st.recursive(
    scalar_texts,
    lambda inner: (
        st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]")
        | st.lists(st.tuples(keys, inner), max_size=5).map(
            lambda kvs: "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in kvs) + "}"
        )
    ),
    max_leaves=12,
)


@settings(max_examples=500)
@given(json_texts)
def test_same_value_or_same_refusal_as_python_json(t: str) -> None:
    _same(t)


@settings(max_examples=300)
@given(st.text(st.sampled_from(list('{}[]":,0123456789.eE+- \tnulltruefalse\\ua')), max_size=40))
def test_broken_text_is_refused_as_python_json_refuses_it(t: str) -> None:
    _same(t)


@pytest.mark.parametrize(
    "t",
    [
        '{"v": 123456789012345678901234567890}',  # orjson would make a float of it
        '{"v": 18446744073709551616}',
        '{"v": -9223372036854775809}',
        '{"v": 999999999999999999}',
        '{"v": 1e400}',  # Python's json: infinity (refused later, with its own reason)
        '{"v": "\\ud800"}',  # a lone surrogate: Python's json keeps it (refused later)
        '{"a": 1, "b": 2, "a": 3}',  # the last value wins, at the first place
        '{"v": NaN}',
        '{"v": 1,}',
    ],
)
def test_where_orjson_and_python_json_differ(t: str) -> None:
    _same(t)
