"""From raw bytes of one delivery (an offline-file line) to a Delivery or a Rejection.

Pure: the caller passes the arrival time and the receiver. Rules (contract
sections 2 and 5):

* `rejected` is decided first: not UTF-8, not JSON, nested deeper than
  `MAX_NESTING` arrays/objects, not an object, `payload` not an object, an
  id that is neither text nor integer, a timestamp that is not RFC 3339
  with offset, or content with no canonical JSON form.
* otherwise the identity may be incomplete (source, transitionId or bootId
  missing, null or empty): that is a decision of the store, not a rejection.
* unknown top-level fields are kept (in the raw text, and as `evidence`) and
  never take part in identity.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from agent.core.contract import (
    ContractError,
    Delivery,
    Rejection,
    imported_delivery,
    normalize_id,
    payload_hash_of_text,
)
from agent.core.jcs import CanonicalJsonError, canonical_json
from agent.core.timestamps import normalize_timestamp

KNOWN_FIELDS = frozenset({"source", "transitionId", "bootId", "sourceTimestamp", "arrivalAt", "payload"})
IDENTITY_FIELDS = ("source", "transitionId", "bootId")
MAX_NESTING = (
    64  # arrays/objects inside each other; deeper input is rejected before any recursive code sees it
)


def _no_constants(name: str) -> Any:
    # Python's json accepts NaN/Infinity by default; JSON does not.
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constants)

# orjson reads an integer beyond 64 bits as a float (Python's json keeps it exact), so a text with
# a run of 19 or more digits anywhere goes to Python's json; every integer of 18 digits or fewer
# fits 64 bits. orjson refuses the rest of what Python's json refuses here (NaN, Infinity, bad
# syntax) and also lone surrogates and numbers out of the double range, which Python's json
# accepts: any refusal goes to Python's json too, so what is accepted, what is made of it and
# every rejection's reason are Python's json's own (tests/unit/test_parse_oracle.py).
# The run is found on the UTF-8 bytes with every digit made `0` and every other byte a space
# (a regular expression takes ten times as long).
_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * 19


def decode_json(text: str) -> Any:
    """`json.loads(text)` with NaN and Infinity refused, through orjson where it gives the same value."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: orjson refuses it
        data = b""
    if data and _LONG_RUN not in data.translate(_DIGITS_ONLY):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return _DECODER.decode(text)


def parse_json_object(raw: bytes | str) -> dict[str, Any]:
    """Decode one line of JSON Lines into an object, or raise ContractError."""
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ContractError(f"not UTF-8 (byte {exc.start})") from exc
    else:
        text = raw
    # Counting brackets runs at C speed; the exact scan only when there are more than the limit.
    if text.count("[") + text.count("{") > MAX_NESTING and (depth := nesting_depth(text)) > MAX_NESTING:
        raise ContractError(f"nested {depth} levels deep; at most {MAX_NESTING} are accepted")
    try:
        obj = decode_json(text)
    except (json.JSONDecodeError, ValueError) as exc:
        raise ContractError(f"not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise ContractError(f"not a JSON object (a {type(obj).__name__})")
    return obj


def nesting_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON text (brackets inside strings do not count).

    Iterative, so no input can reach a recursion limit.
    """
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_delivery(
    raw: bytes | str, *, arrival_at: str, receiver: str, line: int | None = None
) -> Delivery | Rejection:
    """Parse one delivery. `arrival_at` (normalised) is used when the line has none."""
    try:
        obj = parse_json_object(raw)
        return delivery_from_object(obj, raw=raw, arrival_at=arrival_at, receiver=receiver, line=line)
    except ContractError as exc:
        return Rejection(raw=raw, reason=str(exc), arrival_at=arrival_at, receiver=receiver, line=line)


def delivery_from_object(
    obj: dict[str, Any], *, raw: bytes | str, arrival_at: str, receiver: str, line: int | None = None
) -> Delivery:
    """Validate and normalise a parsed object; raise ContractError when it must be rejected."""
    # Non-empty ASCII text (the common id) is its own normal form: it holds no surrogate.
    source = obj.get("source")
    if not (type(source) is str and source and source.isascii()):
        source = normalize_id(source, "source")
    transition_id = obj.get("transitionId")
    if not (type(transition_id) is str and transition_id and transition_id.isascii()):
        transition_id = normalize_id(transition_id, "transitionId")
    boot_id = obj.get("bootId")
    if not (type(boot_id) is str and boot_id and boot_id.isascii()):
        boot_id = normalize_id(boot_id, "bootId")
    source_ts = normalize_timestamp(obj.get("sourceTimestamp"), "sourceTimestamp")
    arrived = normalize_timestamp(obj["arrivalAt"], "arrivalAt") if "arrivalAt" in obj else arrival_at
    if arrived is None:  # "arrivalAt": null means "not given"
        arrived = arrival_at
    payload = obj.get("payload", {})
    if not isinstance(payload, dict):
        raise ContractError(f"payload must be a JSON object, got {type(payload).__name__}")
    try:
        payload_json = canonical_json(payload)
    except CanonicalJsonError as exc:
        raise ContractError(f"payload has no canonical JSON form: {exc}") from exc
    digest = payload_hash_of_text(payload_json, source_ts)
    missing: tuple[str, ...] = ()
    if not (source and transition_id and boot_id):
        found = {"source": source, "transitionId": transition_id, "bootId": boot_id}
        missing = tuple(name for name in IDENTITY_FIELDS if not found[name])
    extras = {} if KNOWN_FIELDS.issuperset(obj) else {k: v for k, v in obj.items() if k not in KNOWN_FIELDS}
    return imported_delivery(
        source,
        transition_id,
        boot_id,
        source_ts,
        arrived,
        payload,
        digest,
        raw,
        receiver,
        line,
        missing,
        extras,
        payload_json,
    )


def incomplete_reason(missing: tuple[str, ...]) -> str:
    """The `reason` recorded for an identity-incomplete delivery."""
    return "missing " + ", ".join(missing) + "; no identity is made up for it"
