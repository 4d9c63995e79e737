"""The Sparkplug B payload through the protobuf runtime (pure: no I/O).

The messages are those protoc generates from the specification's schema
(`agent/sparkplug/proto/sparkplug_b.proto`, Eclipse Tahu's; `sparkplug_b_pb2` checked in and
checked against the schema on every test run). This module holds what the rest of the room
speaks: the agent's own `Metric` and `Property` (mapping.py builds them), `payload()` that turns
them into a `Payload` message, `encode()` that stamps its timestamp and `seq` and serializes it,
and `decode()` / `metrics_of()` that read a payload (an NCMD: input from the network) back.

Int64 travels in `long_value` as its two's complement and Int32 in `int_value` as its 32 bits
(as Tahu does); a value None is `is_null`. A metric's `datatype` is left out when
`with_type` is false (data messages may leave it out; births carry it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from google.protobuf.message import DecodeError as _WireError

from agent.sparkplug.proto import sparkplug_b_pb2 as pb

MetricValue = bool | int | float | str | bytes | None
PbPayload = pb.Payload
PbMetric = pb.Payload.Metric

_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1


class DataType(IntEnum):
    """The Sparkplug data types this project uses (numbers from the specification)."""

    INT32 = pb.Int32
    INT64 = pb.Int64
    UINT64 = pb.UInt64
    FLOAT = pb.Float
    DOUBLE = pb.Double
    BOOLEAN = pb.Boolean
    STRING = pb.String
    BYTES = pb.Bytes


class DecodeError(ValueError):
    """The bytes are not a Sparkplug B payload (or not one this agent can read)."""


@dataclass(frozen=True, slots=True)
class Property:
    """One entry of a metric's PropertySet (`value` None: `is_null`)."""

    key: str
    type: DataType
    value: MetricValue


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    type: DataType
    value: MetricValue  # None: is_null
    timestamp: int | None = None  # UTC milliseconds
    historical: bool = False
    properties: tuple[Property, ...] = ()
    with_type: bool = True  # datatype on the wire (births); data messages may leave it out


# DataType -> (the oneof field of a Metric's or PropertyValue's value, its wire form)
_FIELDS: dict[DataType, tuple[str, Callable[[Any], Any]]] = {
    DataType.INT32: ("int_value", lambda v: int(v) & _U32),
    DataType.INT64: ("long_value", lambda v: int(v) & _U64),
    DataType.UINT64: ("long_value", int),
    DataType.FLOAT: ("float_value", float),
    DataType.DOUBLE: ("double_value", float),
    DataType.BOOLEAN: ("boolean_value", bool),
    DataType.STRING: ("string_value", str),
    DataType.BYTES: ("bytes_value", bytes),
}


def _set_properties(ps: pb.Payload.PropertySet, props: tuple[Property, ...]) -> None:
    ps.keys.extend([p.key for p in props])
    values = ps.values
    for p in props:
        if p.value is None:
            values.add(type=p.type, is_null=True)
        elif p.type is DataType.STRING:
            values.add(type=p.type, string_value=str(p.value))
        elif p.type is DataType.BYTES:
            raise ValueError("a PropertyValue has no Bytes value")
        else:
            name, wire = _FIELDS[p.type]
            values.add(type=p.type, **{name: wire(p.value)})


def add_metric(payload: pb.Payload, m: Metric, *, historical: bool | None = None) -> None:
    """Append `m` to `payload`'s metrics; `historical` overrides `m.historical`."""
    pm = payload.metrics.add(name=m.name)
    if m.timestamp is not None:
        pm.timestamp = m.timestamp
    if m.with_type:
        pm.datatype = m.type
    if m.historical if historical is None else historical:
        pm.is_historical = True
    if m.properties:
        _set_properties(pm.properties, m.properties)
    if m.value is None:
        pm.is_null = True
    elif m.type is DataType.STRING:
        pm.string_value = str(m.value)
    else:
        name, wire = _FIELDS[m.type]
        setattr(pm, name, wire(m.value))


def payload(metrics: Iterable[Metric], *, historical: bool | None = None) -> pb.Payload:
    """A Payload message of `metrics` (its timestamp and `seq` are set by `encode`)."""
    out = pb.Payload()
    for m in metrics:
        add_metric(out, m, historical=historical)
    return out


def encode(body: pb.Payload, timestamp: int, seq: int | None) -> bytes:
    """The wire bytes of `body` sent at `timestamp` with `seq` (None: no seq, as NDEATH)."""
    body.timestamp = timestamp
    if seq is None:
        body.ClearField("seq")
    else:
        body.seq = seq
    return body.SerializeToString()


def decode(buf: bytes) -> pb.Payload:
    """The Payload message in `buf`; DecodeError when it is not one."""
    try:
        return pb.Payload.FromString(buf)
    except _WireError as exc:
        raise DecodeError(str(exc)) from exc


def _dtype(n: int) -> DataType:
    """A datatype this agent does not use reads as String (not given: Bytes)."""
    try:
        return DataType(n)
    except ValueError:
        return DataType.BYTES if n == 0 else DataType.STRING


def _value(msg: pb.Payload.Metric | pb.Payload.PropertyValue, t: int) -> MetricValue:
    which = msg.WhichOneof("value")
    if which is None or which in ("dataset_value", "template_value", "extension_value"):
        return None
    if which in ("propertyset_value", "propertysets_value"):
        return None
    v = getattr(msg, which)
    if which == "long_value" and t == DataType.INT64:
        return int(v) - (1 << 64) if v >= 1 << 63 else int(v)
    if which == "int_value" and t == DataType.INT32:
        return int(v) - (1 << 32) if v >= 1 << 31 else int(v)
    if which == "string_value" and not isinstance(v, str):
        raise DecodeError("string value is not UTF-8")
    return v  # type: ignore[no-any-return]


def _text(v: str | bytes) -> str:
    """A name or key: proto2 hands over bytes that are not UTF-8 as bytes."""
    return v if isinstance(v, str) else bytes(v).decode(errors="replace")


def metrics_of(p: pb.Payload) -> list[Metric]:
    """The metrics of a decoded payload, as this agent's `Metric` (DecodeError when a string
    value is not UTF-8 or a PropertySet's keys and values differ in number)."""
    out = []
    for pm in p.metrics:
        props: tuple[Property, ...] = ()
        if pm.HasField("properties"):
            ps = pm.properties
            if len(ps.keys) != len(ps.values):
                raise DecodeError("PropertySet keys and values differ in number")
            props = tuple(
                Property(_text(k), _dtype(v.type), None if v.is_null else _value(v, v.type))
                for k, v in zip(ps.keys, ps.values, strict=True)
            )
        t = pm.datatype
        value = None if pm.is_null else _value(pm, t)
        ts = pm.timestamp if pm.HasField("timestamp") else None
        with_type = pm.HasField("datatype")
        out.append(Metric(_text(pm.name), _dtype(t), value, ts, pm.is_historical, props, with_type))
    return out
