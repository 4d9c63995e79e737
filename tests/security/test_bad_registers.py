"""Bad register values (hypothesis, 1,000 examples per decoder): rejected or flagged, never a crash.

The rule (docs/pollers.md, "Bad values"): identity is strict, the payload is tolerant. A
transition id that is no counter value (all ones of a 32/64-bit register) fails the channel's
read; a boot id of all ones is "not set"; NaN/Inf in a state or latched value is null in the
payload and flagged; a state without a configured name is the number, flagged; a time that is
no time is null, flagged; an answer with fewer (or more) registers than asked is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config.sources import Channel, Device, Field, ModbusTcp, Ring
from agent.core.jcs import canonical_json
from agent.core.snapshot import Snapshot
from agent.core.tracker import DeviceTracker
from agent.sources.modbus.answers import channel_from_registers, response_problem
from agent.sources.modbus.decode import WORDS, DecodeError, decode, encode
from agent.sources.modbus.plan import Block
from agent.sources.readings import boot_number, ring_item

THOUSAND = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WORD = st.integers(0, 0xFFFF)
EDGE_WORD = st.sampled_from([0, 1, 0x7FFF, 0x8000, 0x7F80, 0x7FC0, 0xFF80, 0xFFFF])
WORDS_ANY = st.one_of(WORD, EDGE_WORD)
KINDS = sorted(WORDS)
STATE_KINDS = ["uint16", "int16", "uint32", "float32", "float64"]
COUNTERS = ["uint16", "uint32", "uint64"]


def channel(tid_type: str, state_type: str, ts_type: str, latched_type: str) -> Channel:
    """Trip: transition id at 0, state at 4, time at 8, latched at 12 (one 16-register block)."""
    return Channel(
        "Trip",
        Field(register=0, type=tid_type),
        Field(register=4, type=state_type, values={0: "Normal", 1: "Trip"}),
        Field(register=8, type=ts_type, unit="ms"),
        latched={"current": Field(register=12, type=latched_type)},
    )


BLOCK = Block("holding", 0, 16)
channels = st.builds(
    channel,
    st.sampled_from(COUNTERS),
    st.sampled_from(STATE_KINDS),
    st.sampled_from(["uint64", "uint32", "float64", "int64"]),
    st.sampled_from(["float32", "float64", "int16", "uint32"]),
)
blocks = st.lists(WORDS_ANY, min_size=16, max_size=16)


@THOUSAND
@given(
    regs=st.lists(WORDS_ANY, max_size=6),
    kind=st.sampled_from(KINDS),
    order=st.sampled_from(["big", "little"]),
)
def test_decode_returns_a_value_of_its_type_or_a_decode_error(regs: list[int], kind: str, order: str) -> None:
    try:
        value = decode(regs, kind, order)
    except DecodeError:
        assert len(regs) != WORDS[kind]
        return
    assert len(regs) == WORDS[kind]
    if kind.startswith("float"):
        assert isinstance(value, float)
        if math.isfinite(value):
            assert decode(encode(value, kind, order), kind, order) == value
    elif kind != "bool":
        bits = 16 * WORDS[kind]
        lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if kind.startswith("int") else (0, 2**bits - 1)
        assert lo <= value <= hi
        assert encode(value, kind, order) == regs


@THOUSAND
@given(ch=channels, regs=blocks)
def test_a_channel_from_any_registers_is_a_valid_read_or_a_failed_one(ch: Channel, regs: list[int]) -> None:
    read = channel_from_registers(ch, {BLOCK: regs}, "big")
    if read.transition_id is None:
        assert read.error  # a failed read says why
        return
    assert 0 <= read.transition_id < 2**64
    if ch.transition_id.type != "uint16":
        assert read.transition_id not in (2**32 - 1, 2**64 - 1)
    payload = {**read.latched, "state": read.state}
    canonical_json(payload)  # no NaN or Inf reaches a payload
    json.dumps(dict(read.raw), allow_nan=False, default=str)  # the evidence is strict JSON too
    for flag in read.raw.get("flags", ()):
        assert isinstance(flag, str) and flag


@THOUSAND
@given(
    ch=channels,
    reads=st.lists(st.tuples(st.sampled_from([None, "17", "18"]), blocks), min_size=1, max_size=4),
)
def test_the_tracker_turns_any_sequence_of_reads_into_deliveries_with_a_payload_hash(
    ch: Channel, reads: list[tuple[str | None, list[int]]]
) -> None:
    tracker = DeviceTracker("PUMP-07")
    for boot, regs in reads:
        read = channel_from_registers(ch, {BLOCK: regs}, "little")
        snap = Snapshot("PUMP-07", "modbus:test", "2026-04-22T08:00:00.000Z", boot, (read,))
        obs = tracker.observe(snap)
        for d in obs.deliveries:
            assert d.payload_hash and d.transition_id != "0"
            json.loads(d.raw)


@THOUSAND
@given(regs=st.lists(WORDS_ANY, min_size=1, max_size=4), kind=st.sampled_from(COUNTERS))
def test_a_boot_id_is_text_or_not_set_never_zero_or_all_ones(regs: list[int], kind: str) -> None:
    words = WORDS[kind]
    regs = (regs * 4)[:words]
    boot = boot_number(decode(regs, kind), bits=16 * words)
    if boot is None:
        assert set(regs) <= {0} or set(regs) == {0xFFFF}
    else:
        assert int(boot) not in (0, 2 ** (16 * words) - 1)


RING = Ring(
    Field(register=100, type="uint32"),
    Field(value=4),
    {
        "seq": Field(offset=0, type="uint32"),
        "channel": Field(offset=2),
        "state": Field(offset=3, type="float32"),
        "transition_id": Field(offset=4, type="uint32"),
        "boot_id": Field(offset=6, type="uint32"),
        "source_timestamp": Field(offset=8, type="uint64"),
    },
    4,
    104,
    12,
)
DEVICE = Device(
    "PUMP-07", (ModbusTcp("127.0.0.1"),), (channel("uint32", "uint16", "uint64", "float32"),), ring=RING
)
slot_values = st.fixed_dictionaries(
    {
        "seq": st.one_of(st.integers(0, 2**32 - 1), st.just(2**32 - 1)),
        "channel": st.integers(0, 0xFFFF),
        "state": st.floats(width=32, allow_nan=True, allow_infinity=True),
        "transition_id": st.one_of(st.integers(0, 2**32 - 1), st.just(2**32 - 1)),
        "boot_id": st.one_of(st.integers(0, 2**32 - 1), st.just(2**32 - 1)),
        "source_timestamp": st.one_of(st.integers(0, 2**64 - 1), st.just(2**64 - 1)),
    }
)


@THOUSAND
@given(values=slot_values)
def test_a_ring_slot_with_any_values_is_an_entry_with_a_valid_identity_or_none(
    values: dict[str, Any],
) -> None:
    item = ring_item(DEVICE, values)
    if item is None:
        return
    assert 0 < item.seq < 2**32 - 1 and 0 <= item.transition_id < 2**32 - 1
    assert item.boot_id is None or item.boot_id not in ("0", str(2**32 - 1))
    canonical_json({"state": item.state})
    tracker = DeviceTracker("PUMP-07", ring_mapped=True)
    tracker.observe_entries([item], read_at="2026-04-22T08:00:00.000Z", receiver="modbus:test")


@THOUSAND
@given(
    table=st.sampled_from(["holding", "input", "coil", "discrete"]),
    count=st.integers(1, 125),
    got=st.integers(0, 140),
    unit=st.integers(0, 247),
    unit_seen=st.integers(0, 247),
)
def test_an_answer_is_refused_unless_it_has_the_quantity_unit_and_function_asked(
    table: str, count: int, got: int, unit: int, unit_seen: int
) -> None:
    fc = {"coil": 1, "discrete": 2, "holding": 3, "input": 4}[table]
    values: Sequence[Any] = [True] * got if table in ("coil", "discrete") else [0] * got
    problem = response_problem(Block(table, 0, count), fc, unit_seen, unit, values)
    bits_ok = table in ("coil", "discrete") and count <= got < count + 8
    ok = unit_seen == unit and (got == count or bits_ok)
    assert (problem is None) == ok, problem
    assert response_problem(Block(table, 0, count), fc + 1, unit, unit, values) is not None


F32_NAN, F32_INF = encode(float("nan"), "float32"), encode(float("inf"), "float32")


def regs_with(tid: list[int], state: list[int], ts: list[int], latched: list[int]) -> list[int]:
    out = [0] * 16
    for start, words in ((0, tid), (4, state), (8, ts), (12, latched)):
        out[start : start + len(words)] = words
    return out


@pytest.mark.parametrize(
    ("tid_type", "state_type", "regs", "tid", "state", "latched", "flag"),
    [
        pytest.param(
            "uint32",
            "float32",
            regs_with([0, 5], F32_NAN, [0, 0, 0, 1], F32_NAN),
            5,
            None,
            None,
            "not a number",
            id="a NaN state and a NaN latched value are null in the payload and flagged",
        ),
        pytest.param(
            "uint32",
            "uint16",
            regs_with([0, 5], [0], [0, 0, 0, 1], F32_INF),
            5,
            "Normal",
            None,
            "inf",
            id="an infinite latched value is null and flagged, the state keeps its name",
        ),
        pytest.param(
            "uint32",
            "uint16",
            regs_with([0, 5], [7], [0, 0, 0, 1], [0, 0]),
            5,
            7,
            0.0,
            "no configured name",
            id="a state value without a configured name is delivered as the number and flagged",
        ),
        pytest.param(
            "uint32",
            "uint16",
            regs_with([0, 5], [1], [0xFFFF] * 4, [0, 0]),
            5,
            "Trip",
            0.0,
            "is no time",
            id="a timestamp of all ones is null and flagged",
        ),
        pytest.param(
            "uint32",
            "uint16",
            regs_with([0xFFFF, 0xFFFF], [1], [0] * 4, [0, 0]),
            None,
            None,
            None,
            None,
            id="a 32-bit transition id of all ones fails the channel read",
        ),
        pytest.param(
            "uint16",
            "uint16",
            regs_with([0xFFFF], [1], [0] * 4, [0, 0]),
            0xFFFF,
            "Trip",
            0.0,
            None,
            id="a 16-bit transition id of all ones is a counter value before its wrap",
        ),
    ],
)
def test_the_documented_rule_for_bad_values(
    tid_type: str,
    state_type: str,
    regs: list[int],
    tid: int | None,
    state: Any,
    latched: Any,
    flag: str | None,
) -> None:
    read = channel_from_registers(channel(tid_type, state_type, "uint64", "float32"), {BLOCK: regs}, "big")
    assert read.transition_id == tid
    if tid is None:
        assert "transition_id refused" in str(read.error) and "all ones" in str(read.error)
        return
    assert read.state == state and read.latched["current"] == latched
    flags = " ".join(read.raw.get("flags", ()))
    assert (flag in flags) if flag else not flags


def test_a_short_answer_names_what_was_asked_and_what_came() -> None:
    problem = response_problem(Block("holding", 10, 8), 3, 1, 1, [0] * 5)
    assert problem == "5 registers for 8 asked"
