"""The Sparkplug B payload through the protobuf runtime (agent/sparkplug/payload.py over the
generated sparkplug_b_pb2): round trips over a large input space, and a payload written by
Eclipse Tahu's JavaScript codec read back exactly. (Our encoder is judged by that codec in
tests/sparkplug, over a real broker; the NCMD path of the forwarder by
tests/unit/test_sparkplug_ncmd.py.)"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.sparkplug.host import HostState, rebirth_requested
from agent.sparkplug.payload import (
    DataType,
    DecodeError,
    Metric,
    Property,
    decode,
    encode,
    metrics_of,
    payload,
)
from agent.sparkplug.window import DeliveryWindow

# npm sparkplug-payload 1.0.3 encodePayload({timestamp: 1776844800123, seq: 7, metrics: [
#   Node Control/Rebirth Boolean true @1776844800000, n Int64 -5, s String "é/x" with properties
#   {k: String "v", z: Int64 null}, d Double 1.5]})
TAHU = bytes.fromhex(
    "08fb80d0a1db3312210a144e6f646520436f6e74726f6c2f52656269727468188080d0a1db33200b700112100a016e"
    "200458fbffffffffffffffff0112200a0173200c4a130a016b0a017a1205080c4201761204080410017a04c3a92f78"
    "120e0a0164200a69000000000000f83f1807"
)


def test_a_payload_written_by_tahu_is_read_exactly() -> None:
    p = decode(TAHU)
    assert p.timestamp == 1776844800123 and p.seq == 7
    got = {m.name: m for m in metrics_of(p)}
    assert got["Node Control/Rebirth"].value is True and got["Node Control/Rebirth"].timestamp == 1776844800000
    assert got["n"].type is DataType.INT64 and got["n"].value == -5
    assert got["s"].value == "é/x"
    assert got["s"].properties == (Property("k", DataType.STRING, "v"), Property("z", DataType.INT64, None))
    assert got["d"].value == 1.5
    assert rebirth_requested(TAHU)


values = st.one_of(
    st.tuples(st.just(DataType.INT64), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just(DataType.UINT64), st.integers(0, 2**64 - 1)),
    st.tuples(st.just(DataType.INT32), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just(DataType.BOOLEAN), st.booleans()),
    st.tuples(st.just(DataType.STRING), st.text()),
    st.tuples(st.just(DataType.DOUBLE), st.floats(allow_nan=False)),
    st.tuples(st.sampled_from(list(DataType)), st.none()),
)


@given(
    st.lists(
        st.tuples(st.text(min_size=1), values, st.integers(0, 2**63), st.booleans(), st.lists(st.tuples(st.text(), values), max_size=3)),
        max_size=5,
    ),
    st.integers(0, 255),
    st.integers(0, 2**63),
)
def test_round_trip(metrics, seq, ts) -> None:  # type: ignore[no-untyped-def]
    ms = [
        Metric(name, t, v, at, hist, tuple(Property(k, pt, pv) for k, (pt, pv) in props))
        for name, (t, v), at, hist, props in metrics
    ]
    back = decode(encode(payload(ms), ts, seq))
    assert (back.timestamp, back.seq, metrics_of(back)) == (ts, seq, ms)


@pytest.mark.parametrize("bad", [b"\xff", b"\x0a\x05ab", b"\x0f", b"\x12\x03\x0a\x05a"])
def test_what_is_not_a_payload_raises_decode_error(bad: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(bad)


def test_what_is_not_utf_8_or_not_paired_is_a_decode_error_too() -> None:
    # proto2 hands such strings over as bytes: a string value is refused, a name is read with U+FFFD
    not_utf8 = bytes.fromhex("120a0a016e7a05c3a9ff2f78")  # metric n, string_value c3 a9 ff 2f 78
    with pytest.raises(DecodeError, match="UTF-8"):
        metrics_of(decode(not_utf8))
    assert metrics_of(decode(bytes.fromhex("12050a03ff6e31")))[0].name == "\ufffdn1"
    unpaired = bytes.fromhex("120b0a016e4a060a016b0a016a")  # properties: keys k, j and no value
    with pytest.raises(DecodeError, match="differ in number"):
        metrics_of(decode(unpaired))


def test_the_nbirth_and_ndeath_shapes_on_the_wire() -> None:
    # timestamp 9, metric {name bdSeq, timestamp 5, datatype Int64, long_value 3}: field by field
    metric = "0a05" + b"bdSeq".hex() + "1805" + "2004" + "5803"
    death = bytes.fromhex("0809" + "120d" + metric)
    body = payload([Metric("bdSeq", DataType.INT64, 3, 5)])
    assert encode(body, 9, None) == death  # NDEATH: no seq
    assert encode(body, 9, 0) == death + bytes.fromhex("1800")  # NBIRTH: seq 0 on the wire
    assert encode(body, 9, None) == death  # the same message re-encoded without it drops it again


@pytest.mark.parametrize(
    ("messages", "online", "ignored"),
    [
        ([b'{"online": true, "timestamp": 5}'], True, 0),
        ([b'{"online": true, "timestamp": 5}', b'{"online": false, "timestamp": 4}'], True, 1),  # older: ignored
        ([b'{"online": true, "timestamp": 5}', b'{"online": false, "timestamp": 5}'], False, 0),  # not older
        ([b"ONLINE"], None, 1),  # 2.2 text on the 3.0 topic
        ([b'{"online": "yes", "timestamp": 5}'], None, 1),
        ([b"not json"], None, 1),
    ],
)
def test_state_of_the_primary_host(messages: list[bytes], online: bool | None, ignored: int) -> None:
    h = HostState()
    for m in messages:
        h.seen("spBv1.0/STATE/scada-1", m, v22=False)
    assert (h.online, h.ignored) == (online, ignored)


def test_state_v22_only_when_asked() -> None:
    h = HostState()
    assert h.seen("STATE/scada-1", b"ONLINE", v22=False) is None
    assert h.seen("STATE/scada-1", b"ONLINE", v22=True) is True
    assert h.seen("STATE/scada-1", b"OFFLINE", v22=True) is False


def test_the_delivery_window() -> None:
    w = DeliveryWindow(4.0)
    w.published(10.0, [1, 2])
    w.published(11.0, [3])
    assert w.due(13.9) == [] and w.next_due() == 14.0
    assert w.due(14.0) == [1, 2] and w.rows == 1
    w.published(12.0, [4])
    assert w.broken() == 2 and w.rows == 0 and w.due(100.0) == []
