"""The hand-written Sparkplug B codec the agent used until issue 37 (it was
agent/sparkplug/codec.py), kept here only as the baseline of bench/sparkplug_codec.py: the agent
now encodes and decodes through the protobuf runtime (agent/sparkplug/payload.py, the module
protoc generates from the specification's schema). Nothing in agent/ imports this file.

It writes and reads the protobuf wire format directly, for the fields edge-agent sends and reads:

    Payload        1 timestamp (uint64)  2 metrics (Metric, repeated)  3 seq (uint64)
    Metric         1 name  2 alias  3 timestamp  4 datatype  5 is_historical  6 is_transient
                   7 is_null  9 properties (PropertySet)
                   values: 10 int_value (uint32)  11 long_value (uint64)  12 float  13 double
                           14 boolean_value  15 string_value  16 bytes_value
    PropertySet    1 keys (string, repeated)  2 values (PropertyValue, repeated)
    PropertyValue  1 type (uint32)  2 is_null  3 int_value  4 long_value  5 float  6 double
                   7 boolean_value  8 string_value

It takes the agent's own `Metric`, `Property` and `DataType` (agent/sparkplug/payload.py), so
both sides of the bench encode the very same objects.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from agent.sparkplug.payload import DataType, DecodeError, Metric, MetricValue, Property


@dataclass(slots=True)
class Payload:
    timestamp: int | None = None
    seq: int | None = None
    metrics: list[Metric] = field(default_factory=list)


# --- encoding ---------------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    if n < 0:
        n &= (1 << 64) - 1  # two's complement, as protobuf writes a negative int64
    if n < 0x80:
        return bytes((n,))
    if n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(field_no: int, wire: int) -> bytes:
    return _KEYS.get((field_no, wire)) or _varint((field_no << 3) | wire)


_KEYS = {(f, w): _varint((f << 3) | w) for f in range(1, 20) for w in (0, 1, 2, 5)}
_LEN_KEYS = {f: _varint((f << 3) | 2) for f in range(1, 20)}


def _len_field(field_no: int, data: bytes) -> bytes:
    n = len(data)
    return _LEN_KEYS[field_no] + (bytes((n,)) if n < 0x80 else _varint(n)) + data


def _value(base: int, t: DataType, v: MetricValue) -> bytes:
    """The value field of a metric (`base` 10) or a property value (`base` 3)."""
    if t is DataType.STRING:
        return _len_field(base + 5, str(v).encode())
    if t in (DataType.INT64, DataType.UINT64):
        return _key(base + 1, 0) + _varint(int(v))  # type: ignore[arg-type]
    if t is DataType.INT32:
        return _key(base, 0) + _varint(int(v) & 0xFFFFFFFF)  # type: ignore[arg-type]
    if t is DataType.BOOLEAN:
        return _key(base + 4, 0) + (b"\x01" if v else b"\x00")
    if t is DataType.DOUBLE:
        return _key(base + 3, 1) + struct.pack("<d", float(v))  # type: ignore[arg-type]
    if t is DataType.FLOAT:
        return _key(base + 2, 5) + struct.pack("<f", float(v))  # type: ignore[arg-type]
    if t is DataType.BYTES and base == 10:
        return _len_field(16, bytes(v))  # type: ignore[arg-type]
    raise ValueError(f"no encoding for {t.name}")


@lru_cache(maxsize=256)
def _keys_block(keys: tuple[str, ...]) -> bytes:
    return b"".join(_len_field(1, k.encode()) for k in keys)


@lru_cache(maxsize=256)
def _name_field(name: str) -> bytes:
    return _len_field(1, name.encode())


_STRING_TYPE = b"\x08\x0c"  # PropertyValue.type = String
_IS_NULL = b"\x10\x01"  # PropertyValue.is_null = true


def encode_properties(props: tuple[Property, ...]) -> bytes:
    """A PropertySet: the keys (one block per set of key names, kept), then the values."""
    values = []
    for p in props:
        v = p.value
        if p.type is DataType.STRING:
            body = _STRING_TYPE + (_IS_NULL if v is None else _len_field(8, str(v).encode()))
        else:
            body = _key(1, 0) + _varint(int(p.type))
            body += _IS_NULL if v is None else _value(3, p.type, v)
        values.append(_len_field(2, body))
    return _keys_block(tuple(p.key for p in props)) + b"".join(values)


def encode_metric(m: Metric, props_bytes: bytes | None = None, *, historical: bool | None = None) -> bytes:
    """One Metric message (its body, without the field key). `props_bytes`: the PropertySet
    already encoded, else `m.properties` are encoded; `historical` overrides `m.historical`."""
    out = [_name_field(m.name)]
    if m.timestamp is not None:
        out.append(b"\x18" + _varint(m.timestamp))  # field 3 varint
    if m.with_type:
        out.append(b"\x20" + _varint(int(m.type)))  # field 4 varint
    if m.historical if historical is None else historical:
        out.append(b"\x28\x01")  # field 5 varint: is_historical true
    if props_bytes is None and m.properties:
        props_bytes = encode_properties(m.properties)
    if props_bytes:
        out.append(_len_field(9, props_bytes))
    out.append(b"\x38\x01" if m.value is None else _value(10, m.type, m.value))  # field 7: is_null
    return b"".join(out)


def encode_payload(timestamp: int, seq: int | None, metrics: list[bytes]) -> bytes:
    """A Payload from metrics already encoded (`encode_metric`); `seq` None for NDEATH."""
    out = _key(1, 0) + _varint(timestamp)
    out += b"".join(_len_field(2, m) for m in metrics)
    if seq is not None:
        out += _key(3, 0) + _varint(seq)
    return out


def encode(payload: Payload) -> bytes:
    return encode_payload(payload.timestamp or 0, payload.seq, [encode_metric(m) for m in payload.metrics])


# --- decoding ---------------------------------------------------------------------------------


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = n = 0
    while True:
        if i >= len(buf):
            raise DecodeError("truncated varint")
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, i
        shift += 7
        if shift > 63:
            raise DecodeError("varint too long")


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of every field of one message."""
    out: list[tuple[int, int, Any]] = []
    i = 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        no, wire = key >> 3, key & 7
        if no == 0:
            raise DecodeError("field number 0")
        if wire == 0:
            v, i = _read_varint(buf, i)
            out.append((no, wire, v))
        elif wire == 1:
            if i + 8 > len(buf):
                raise DecodeError("truncated fixed64")
            out.append((no, wire, buf[i : i + 8]))
            i += 8
        elif wire == 2:
            n, i = _read_varint(buf, i)
            if i + n > len(buf):
                raise DecodeError("truncated length-delimited field")
            out.append((no, wire, buf[i : i + n]))
            i += n
        elif wire == 5:
            if i + 4 > len(buf):
                raise DecodeError("truncated fixed32")
            out.append((no, wire, buf[i : i + 4]))
            i += 4
        else:
            raise DecodeError(f"wire type {wire} is not supported")
    return out


def _signed64(n: int) -> int:
    return n - (1 << 64) if n >= 1 << 63 else n


def _decode_value(base: int, t: int, fields: dict[int, Any]) -> MetricValue:
    if base + 1 in fields:
        return _signed64(fields[base + 1]) if t == DataType.INT64 else int(fields[base + 1])
    if base in fields:
        n = int(fields[base])
        return n - (1 << 32) if t == DataType.INT32 and n >= 1 << 31 else n
    if base + 4 in fields:
        return bool(fields[base + 4])
    if base + 5 in fields:
        try:
            return bytes(fields[base + 5]).decode()
        except UnicodeDecodeError as exc:
            raise DecodeError(f"string value is not UTF-8: {exc}") from exc
    if base + 3 in fields:
        return float(struct.unpack("<d", fields[base + 3])[0])
    if base + 2 in fields:
        return float(struct.unpack("<f", fields[base + 2])[0])
    if base == 10 and 16 in fields:
        return bytes(fields[16])
    return None


def _dtype(n: int) -> DataType:
    try:
        return DataType(n)
    except ValueError:
        return DataType.BYTES if n == 0 else DataType(DataType.STRING)


def _decode_properties(buf: bytes) -> tuple[Property, ...]:
    keys: list[str] = []
    values: list[tuple[DataType, MetricValue]] = []
    for no, wire, v in _fields(buf):
        if no == 1 and wire == 2:
            keys.append(bytes(v).decode(errors="replace"))
        elif no == 2 and wire == 2:
            f = {n: x for n, _, x in _fields(v)}
            t = int(f.get(1, 0))
            values.append((_dtype(t), None if f.get(2) else _decode_value(3, t, f)))
    if len(keys) != len(values):
        raise DecodeError("PropertySet keys and values differ in number")
    return tuple(Property(k, t, x) for k, (t, x) in zip(keys, values, strict=True))


def _decode_metric(buf: bytes) -> Metric:
    f: dict[int, Any] = {}
    for no, _, v in _fields(buf):
        f[no] = v
    t = int(f.get(4, 0))
    name = bytes(f.get(1, b"")).decode(errors="replace")
    value = None if f.get(7) else _decode_value(10, t, f)
    props = _decode_properties(f[9]) if 9 in f else ()
    return Metric(name, _dtype(t), value, f.get(3), bool(f.get(5, 0)), props, with_type=4 in f)


def decode(buf: bytes) -> Payload:
    """The payload in `buf`; DecodeError when it is not one."""
    out = Payload()
    for no, wire, v in _fields(bytes(buf)):
        if no == 1 and wire == 0:
            out.timestamp = v
        elif no == 2 and wire == 2:
            out.metrics.append(_decode_metric(v))
        elif no == 3 and wire == 0:
            out.seq = v
    return out
