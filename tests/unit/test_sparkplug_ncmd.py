"""NCMD is input from the network: whatever bytes arrive on the node's NCMD topic, the forwarder's
inbox (`SparkplugForwarder._inbox`, where the session's messages are acted on) never raises past
itself, except `_Rebirth` for a command that asks for one. What is not a Sparkplug payload is
counted in `bad_commands`, logged, and ignored; the commands after it are still read.

The forwarder and its session are real (a store in tmp_path, an aiomqtt client never connected):
only `_inbox` runs, fed through `Session.inbox` as `Session._read` feeds it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiomqtt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config.sparkplug import SparkplugUpstream
from agent.sparkplug.forwarder import SparkplugForwarder, _Rebirth
from agent.sparkplug.host import rebirth_requested
from agent.sparkplug.payload import DataType, DecodeError, Metric, decode, encode, payload
from agent.sparkplug.proto import sparkplug_b_pb2 as pb
from agent.sparkplug.session import Session
from agent.store.store import Store

NCMD = "spBv1.0/plant-1/NCMD/gw-test"
REBIRTH = "Node Control/Rebirth"
TAHU = bytes.fromhex(  # npm sparkplug-payload 1.0.3, as in test_sparkplug_payload.py
    "08fb80d0a1db3312210a144e6f646520436f6e74726f6c2f52656269727468188080d0a1db33200b700112100a016e"
    "200458fbffffffffffffffff0112200a0173200c4a130a016b0a017a1205080c4201761204080410017a04c3a92f78"
    "120e0a0164200a69000000000000f83f1807"
)
SEEDS = [
    TAHU,
    encode(payload([Metric(REBIRTH, DataType.BOOLEAN, True, 5)]), 9, 0),
    encode(payload([Metric("Node Control/Reboot", DataType.BOOLEAN, True, 5)]), 9, 0),
]
NUMBER_TYPES = {DataType.INT32, DataType.INT64, DataType.UINT64, DataType.FLOAT, DataType.DOUBLE}


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A real NCMD cut short, with a byte changed, or with bytes put in."""
    data = bytearray(draw(st.sampled_from(SEEDS)))
    i = draw(st.integers(0, len(data)))
    how = draw(st.sampled_from(["cut", "change", "insert"]))
    if how == "cut":
        return bytes(data[:i])
    if how == "change" and i < len(data):
        data[i] = draw(st.integers(0, 255))
        return bytes(data)
    return bytes(data[:i] + draw(st.binary(min_size=1, max_size=12)) + data[i:])


VALUES = st.one_of(
    st.tuples(st.just("int_value"), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("long_value"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("double_value"), st.floats()),
    st.tuples(st.just("boolean_value"), st.booleans()),
    st.tuples(st.just("string_value"), st.text(max_size=8)),
    st.tuples(st.just("bytes_value"), st.binary(max_size=8)),
    st.none(),
)


@st.composite
def commands(draw: st.DrawFn) -> tuple[bytes, bool, bool]:
    """A well-formed payload of metrics a host might send; whether it asks for a rebirth (a
    metric `Node Control/Rebirth` holding the Boolean true, not `is_null`, whose datatype, if
    any, is not one of the number types); whether a PropertySet in it has keys and values that
    differ in number (then the agent reads none of it: a bad command)."""
    p = pb.Payload()
    if draw(st.booleans()):
        p.seq = draw(st.integers(0, 255))
    asks = unpaired = False
    for _ in range(draw(st.integers(0, 4))):
        m = p.metrics.add(name=draw(st.sampled_from([REBIRTH, "Node Control/Reboot", "x"])))
        datatype = draw(st.none() | st.integers(0, 40))
        if datatype is not None:
            m.datatype = datatype
        m.is_null = draw(st.booleans()) and draw(st.booleans())
        value = draw(VALUES)
        if value is not None:
            setattr(m, *value)
        for _ in range(draw(st.integers(0, 2))):
            m.properties.keys.append(draw(st.text(max_size=4)))
            if draw(st.booleans()):
                m.properties.values.add(type=12, string_value=draw(st.text(max_size=4)))
        unpaired = unpaired or len(m.properties.keys) != len(m.properties.values)
        asks = asks or (
            m.name == REBIRTH
            and not m.is_null
            and value == ("boolean_value", True)
            and (datatype is None or datatype not in NUMBER_TYPES)
        )
    return p.SerializeToString(), asks and not unpaired, unpaired


@pytest.fixture
async def forwarder(tmp_path: Path) -> AsyncIterator[tuple[SparkplugForwarder, Session]]:
    store = await Store.open(tmp_path / "store.db")
    up = SparkplugUpstream("ignition", "mqtt://127.0.0.1:1", group_id="plant-1")
    fwd = SparkplugForwarder(store, up, site="site-a", gateway="gw-test")
    session = Session(aiomqtt.Client("127.0.0.1", 1), up, "gw-test", bd_seq=1)
    yield fwd, session
    session.lost.cancel()
    await store.close()


def take(fwd: SparkplugForwarder, session: Session, *messages: bytes) -> bool:
    """Hand `messages` to the forwarder as NCMDs; whether it asked for a rebirth. Any exception
    but `_Rebirth` escapes, and fails the test."""
    for m in messages:
        session.inbox.put_nowait((NCMD, m))
    try:
        fwd._inbox(session, births_done=True)
    except _Rebirth:
        return True
    return False


def not_a_payload(data: bytes) -> bool:
    try:
        rebirth_requested(data)
    except DecodeError:
        return True
    return False


async def test_any_bytes_on_ncmd_are_ignored_or_acted_on_never_raised(
    forwarder: tuple[SparkplugForwarder, Session],
) -> None:
    fwd, session = forwarder

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.one_of(st.binary(max_size=300), mutated()))
    def check(data: bytes) -> None:
        before = fwd.state.bad_commands
        rebirth = take(fwd, session, data)
        bad = not_a_payload(data)
        assert fwd.state.bad_commands - before == int(bad)
        assert rebirth == (not bad and rebirth_requested(data))
        assert session.inbox.empty()

    check()


async def test_a_host_s_commands_ask_for_a_rebirth_exactly_when_the_rule_says(
    forwarder: tuple[SparkplugForwarder, Session],
) -> None:
    fwd, session = forwarder

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(commands())
    def check(command: tuple[bytes, bool, bool]) -> None:
        data, asks, unpaired = command
        decode(data)  # well formed protobuf
        before = fwd.state.bad_commands
        assert take(fwd, session, data) is asks
        assert fwd.state.bad_commands - before == int(unpaired)

    check()


async def test_a_bad_command_is_logged_and_the_next_one_still_read(
    forwarder: tuple[SparkplugForwarder, Session], caplog: pytest.LogCaptureFixture
) -> None:
    fwd, session = forwarder
    caplog.set_level(logging.WARNING, logger="agent.sparkplug.forwarder")
    assert take(fwd, session, b"\xff\xff\xff\xff\x01\x02", SEEDS[1]) is True
    assert fwd.state.bad_commands == 1
    assert "sparkplug NCMD ignored: not a Sparkplug payload" in caplog.text
    assert take(fwd, session, TAHU[:-3]) is False  # cut inside its last field
    assert fwd.state.bad_commands == 2
