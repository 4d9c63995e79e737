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


def canonical_json(value: Any) -> str:
    """Serialise parsed JSON (dict, list, str, int, float, bool, None) canonically."""
    if type(value) is dict:
        if (fast := _flat_orjson(value)) is not None:
            return fast
        if (fast := _flat_fast(value)) is not None:
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
