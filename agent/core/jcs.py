"""Canonical JSON (RFC 8785, "JCS") for payload hashing.

Pure: no I/O. The payload hash must not depend on key order, whitespace or on
how a number was spelled (`1.0` and `1` are the same number), so the hash is
taken over this canonical form, never over the bytes that arrived.

One deliberate deviation from RFC 8785: JSON integers are written as their
exact decimal text. RFC 8785 passes every number through an IEEE 754 double,
which would make two different 64-bit counter values (above 2**53) hash the
same; merging two contents into one is the one thing the store must never do.
For every integer below 2**53 in magnitude the output is identical to JCS.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson


class CanonicalJsonError(ValueError):
    """The value cannot be written as canonical JSON (NaN, Infinity, lone surrogate, odd type)."""


_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\\ud800-\udfff]')


def json_string(s: str) -> str:
    """A text as RFC 8785 writes it."""
    if _NEEDS_ESCAPE.search(s) is None:
        return f'"{s}"'
    out = ['"']
    for ch in s:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x20:
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise CanonicalJsonError("string holds a lone UTF-16 surrogate, which is not valid Unicode")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def format_number(x: float) -> str:
    """ECMAScript `Number.prototype.toString` of a finite double, as RFC 8785 requires."""
    if math.isnan(x) or math.isinf(x):
        raise CanonicalJsonError("NaN and Infinity have no JSON form")
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    # repr() gives the shortest digits that round-trip, as ECMAScript requires.
    mantissa, _, exp_text = repr(abs(x)).partition("e")
    exponent = int(exp_text) if exp_text else 0
    whole, _, frac = mantissa.partition(".")
    if whole != "0":
        digits, n = whole + frac, len(whole) + exponent
    else:
        significant = frac.lstrip("0")
        digits, n = significant, exponent - (len(frac) - len(significant))
    # value = 0.<digits> x 10**n
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        exp = f"e{'+' if e >= 0 else '-'}{abs(e)}"
        body = digits + exp if k == 1 else digits[0] + "." + digits[1:] + exp
    return sign + body


def _utf16_key(s: str) -> bytes:
    # RFC 8785 sorts member names by their UTF-16 code units, not by code points.
    return s.encode("utf-16-be", "surrogatepass")


_FLAT_TYPES = (str, int, bool, type(None))


def _flat_fast(d: dict[Any, Any]) -> str | None:
    """The common payload (ASCII keys; text, integer, boolean or null values) through the C encoder.

    For such objects json.dumps with sorted keys and no whitespace is exactly
    the RFC 8785 form (same escapes; ASCII keys sort the same in UTF-16).
    Anything else (floats, nesting, non-ASCII keys) takes the general path.
    """
    for k, v in d.items():
        if type(k) is not str or not k.isascii() or type(v) not in _FLAT_TYPES:
            return None
        if type(v) is str and _NEEDS_ESCAPE.search(v) is not None:
            return None
    return _FLAT.encode(d)


# What `json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` uses, made once.
_FLAT = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_FLAT_SET = frozenset(_FLAT_TYPES)
_SORTED = orjson.OPT_SORT_KEYS


def _flat_orjson(d: dict[Any, Any]) -> str | None:
    """The common payload through orjson, when its output is the RFC 8785 form.

    For an object whose values are text, integers, booleans or null, orjson with sorted keys
    writes what RFC 8785 asks (no whitespace, the same escapes, integers in decimal) as long as
    the keys sort the same: orjson sorts by code point, RFC 8785 by UTF-16 code unit, which
    agree for ASCII, so only an all-ASCII result is taken. orjson refuses integers beyond
    64 bits and lone surrogates (the caller then takes the other paths).
    """
    if not _FLAT_SET.issuperset(map(type, d.values())):
        return None
    try:
        out = orjson.dumps(d, option=_SORTED)
    except orjson.JSONEncodeError:
        return None
    return out.decode() if out.isascii() else None


class _Slow(Exception):
    """The value needs the general writer."""


_SAFE_FLOAT_INT = 2**53


def _es_ready(value: Any) -> Any:
    """`value` with every float the C encoders would not write as RFC 8785 does replaced.

    An integral float below 2**53 becomes its int (RFC 8785 writes 1.0 as 1); any other
    non-integral float whose `repr` has no exponent (1e-4 <= |x| < 1e16) is already in
    ECMAScript's form (the shortest digits that round-trip, the same decimal point): it stays.
    Anything else (an exponent, NaN, Infinity, a non-text key, a type JSON does not have)
    raises _Slow. Containers are copied only where a float changed."""
    t = type(value)
    if t is float:
        return _es_float(value)
    if t is dict:
        copy = None
        for k, v in value.items():
            if type(k) is not str:
                raise _Slow
            tv = type(v)
            if tv is str or tv is int or tv is bool or v is None:
                continue
            nv = _es_float(v) if tv is float else _es_ready(v)
            if nv is not v:
                if copy is None:
                    copy = dict(value)
                copy[k] = nv
        return value if copy is None else copy
    if t is list or t is tuple:
        items = None
        for i, v in enumerate(value):
            tv = type(v)
            if tv is str or tv is int or tv is bool or v is None:
                continue
            nv = _es_float(v) if tv is float else _es_ready(v)
            if nv is not v:
                if items is None:
                    items = list(value)
                items[i] = nv
        return value if items is None else items
    if t is str or t is int or t is bool or value is None:
        return value
    raise _Slow


def _es_float(x: float) -> float | int:
    if x.is_integer():
        if abs(x) < _SAFE_FLOAT_INT:
            return int(x)
        raise _Slow  # repr would write a trailing .0 (or an exponent)
    if "e" in (r := repr(x)) or "n" in r:
        raise _Slow
    return x


# A surrogate (a lone one has no canonical form; the general writer refuses it) or a character
# beyond the BMP (its UTF-16 code units sort member names otherwise than code points do).
_NOT_C_SAFE = re.compile("[\ud800-\udfff\U00010000-\U0010ffff]")


def _nested_fast(value: dict[Any, Any] | list[Any]) -> str | None:
    """Floats, nesting and non-ASCII text through a C encoder, when its output is RFC 8785.

    After `_es_ready`, orjson with sorted keys (or, for an integer beyond 64 bits, json.dumps
    with sorted keys, no whitespace and ensure_ascii off) writes what RFC 8785 asks: the same
    escapes, integers in exact decimal, floats as `repr` writes them, and member names in code
    point order, which is UTF-16 order as long as no character lies beyond the BMP (such
    output, or a surrogate, goes to the general writer)."""
    try:
        ready = _es_ready(value)
    except _Slow:
        return None
    try:
        out = orjson.dumps(ready, option=_SORTED).decode()
    except orjson.JSONEncodeError:  # an integer beyond 64 bits, a lone surrogate
        try:
            out = _FLAT.encode(ready)
        except ValueError:
            return None
    return out if _NOT_C_SAFE.search(out) is None else None


def canonical_json(value: Any) -> str:
    """Serialise parsed JSON (dict, list, str, int, float, bool, None) canonically."""
    if type(value) is dict:
        if (fast := _flat_orjson(value)) is not None:
            return fast
        if (fast := _flat_fast(value)) is not None:
            return fast
        if (fast := _nested_fast(value)) is not None:
            return fast
    return canonical_json_general(value)


def canonical_json_general(value: Any) -> str:
    """The RFC 8785 writer without the fast path (the fast path is tested against it)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 2**53:
            return str(int(value))
        return format_number(value)
    if isinstance(value, str):
        return json_string(value)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise CanonicalJsonError("an object key is not text")
        items = []
        for key in sorted(value, key=_utf16_key):
            items.append(json_string(key) + ":" + canonical_json(value[key]))
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(canonical_json(v) for v in value) + "]"
    raise CanonicalJsonError(f"{type(value).__name__} is not a JSON value")
