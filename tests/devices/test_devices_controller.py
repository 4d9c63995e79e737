"""The pure controller model, its scenarios and its register image: no sockets, no sleeping."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from devices.agent_config import config_yaml, device_config
from devices.controller import ChannelSpec, Controller, ManualClock, RingEntry
from devices.modbus_map import RegisterMap
from devices.opcua_nodes import NodeLayout
from devices.scenario import RandomLoad, apply_model_step, load_scenario


@pytest.mark.parametrize(
    ("bits", "skip_zero", "start", "steps", "expected"),
    [
        pytest.param(32, False, 0, 1, 1, id="the first transition of a boot is 1"),
        pytest.param(16, False, 65534, 2, 0, id="a 16-bit counter wraps 65535 to 0"),
        pytest.param(16, False, 65535, 2, 1, id="after the wrap to 0 the next transition is 1"),
        pytest.param(16, True, 65535, 1, 1, id="with skip_zero a 16-bit counter wraps 65535 to 1"),
        pytest.param(32, False, 2**32 - 1, 1, 0, id="a 32-bit counter wraps at 2**32"),
        pytest.param(32, False, 90, 3, 93, id="three fast transitions move the counter by three"),
    ],
)
def test_counter_steps(bits: int, skip_zero: bool, start: int, steps: int, expected: int) -> None:
    ctrl = Controller("C", [ChannelSpec("Trip", counter_bits=bits, skip_zero=skip_zero)], clock=ManualClock())  # type: ignore[arg-type]
    ctrl.set_counter("Trip", start)
    for _ in range(steps):
        ctrl.transition("Trip")
    assert ctrl.channel("Trip").transition_id == expected
    assert ctrl.ring_entries()[-1].transition_id == expected


@pytest.mark.parametrize(
    ("channel", "given_states", "expected"),
    [
        pytest.param("Trip", [None, None], [1, 0], id="a two-state channel toggles"),
        pytest.param(
            "Overload", [None, None, None], [1, 2, 0], id="a three-state channel cycles through its values"
        ),
        pytest.param("Overload", [2, 2], [2, 2], id="an explicit state may repeat: a re-trip still counts"),
    ],
)
def test_states(channel: str, given_states: list[int | None], expected: list[int], pump: Controller) -> None:
    got = [pump.transition(channel, s).state for s in given_states]
    assert got == expected
    assert pump.channel(channel).transition_id == len(expected)


def test_transition_stamps_the_injected_clock(pump: Controller, clock: ManualClock) -> None:
    clock.advance(1234)
    entry = pump.transition("Trip")
    assert entry.source_time_ms == clock() == pump.channel("Trip").source_time_ms


def test_restart_increments_boot_counter_resets_counters_and_keeps_ring(
    clock: ManualClock, make_pump: Callable[..., Controller]
) -> None:
    ctrl = make_pump(boot_id_start=17)
    ctrl.transition("Trip")
    ctrl.transition("Trip")
    assert ctrl.restart(clock_jump_ms=-60_000) == 18
    assert [ctrl.channel(i).transition_id for i in range(2)] == [0, 0]
    assert [(e.transition_id, e.boot_id) for e in ctrl.ring_entries()] == [(1, 17), (2, 17)]
    entry = ctrl.transition("Trip")
    assert (entry.seq, entry.transition_id, entry.boot_id) == (3, 1, 18)
    assert entry.source_time_ms == clock() - 60_000


def test_random32_boot_ids_are_seeded_nonzero_and_change_on_restart(
    make_pump: Callable[..., Controller],
) -> None:
    a, b = (
        make_pump(boot_id_mode="random32", seed=5),
        make_pump(boot_id_mode="random32", seed=5),
    )
    seen = [a.boot_id] + [a.restart() for _ in range(20)]
    assert seen == [b.boot_id] + [b.restart() for _ in range(20)]
    assert all(x and x != y for x, y in zip(seen[1:], seen, strict=False))


def test_controller_without_boot_id_writes_boot_zero_in_ring(make_pump: Callable[..., Controller]) -> None:
    ctrl = make_pump(boot_id_mode="none")
    assert ctrl.restart() is None
    assert ctrl.transition("Trip").boot_id == 0
    assert "boot_id" not in RegisterMap(ctrl).field_specs()
    assert "boot_id" not in NodeLayout(ctrl).field_specs()


@pytest.mark.parametrize(
    ("channel", "value"),
    [
        pytest.param("Overload", 65536, id="a 16-bit counter refuses 65536"),
        pytest.param("Trip", -1, id="a counter refuses negative values"),
    ],
)
def test_set_counter_rejects_values_that_do_not_fit(pump: Controller, channel: str, value: int) -> None:
    with pytest.raises(ValueError, match="does not fit"):
        pump.set_counter(channel, value)


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 10),
    ops=st.lists(st.one_of(st.integers(0, 1), st.just("restart")), max_size=60),
)
def test_ring_buffer_matches_a_list_model(capacity: int, ops: list[int | str]) -> None:
    """The ring is the tail of the list of every transition ever made, slot = (seq - 1) % capacity."""
    ctrl = Controller("C", [ChannelSpec("A"), ChannelSpec("B")], clock=ManualClock(), ring_capacity=capacity)
    model: list[RingEntry] = []
    for op in ops:
        if op == "restart":
            ctrl.restart()
        else:
            model.append(ctrl.transition(int(op)))
    assert ctrl.head == len(model)
    assert ctrl.ring_entries() == model[-capacity:]
    assert [e.seq for e in model] == list(range(1, len(model) + 1))
    for k, slot in enumerate(ctrl.ring_slots()):
        assert slot is None or (slot.seq - 1) % capacity == k


SCENARIO = """
controllers:
  - name: PUMP-07
    boot_id: counter
    boot_id_start: 17
    ring: 4
    channels:
      - {name: Trip, counter_bits: 16}
steps:
  - {transition: PUMP-07/Trip, state: 1}
  - {set_counter: PUMP-07/Trip, value: 65535}
  - {transition: PUMP-07/Trip, count: 2}
  - {wait: 0.1}
  - {restart: PUMP-07}
  - {cut: PUMP-07, seconds: 1}
"""


def test_scenario_model_steps_run_and_plant_steps_are_left_to_the_plant() -> None:
    scenario = load_scenario(SCENARIO, clock=ManualClock())
    ctrls = {c.name: c for c in scenario.controllers}
    handled = [apply_model_step(ctrls, s) for s in scenario.steps]
    assert handled == [True, True, True, False, True, False]
    pump = ctrls["PUMP-07"]
    assert [(e.transition_id, e.boot_id) for e in pump.ring_entries()] == [(1, 17), (0, 17), (1, 17)]
    assert (pump.boot_id, pump.channel("Trip").transition_id) == (18, 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("steps: [{jump: X}]", "needs exactly one of", id="an unknown action is refused"),
        pytest.param(
            "controllers: [{name: A}]\nsteps: [{restart: B}]",
            "unknown controller",
            id="an unknown device is refused",
        ),
        pytest.param(
            "controllers: [{name: A, boot_id: maybe}]", "boot_id must be", id="a bad boot id mode is refused"
        ),
    ],
)
def test_bad_scenarios_fail_before_running(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_scenario(text)


def test_random_load_is_deterministic_for_a_seed(pump: Controller) -> None:
    a, b = RandomLoad([pump], 50.0, seed=3), RandomLoad([pump], 50.0, seed=3)
    assert [a.next()[::2] for _ in range(20)] == [b.next()[::2] for _ in range(20)]


def test_a_ring_that_cannot_be_read_in_one_request_is_refused(make_pump: Callable[..., Controller]) -> None:
    with pytest.raises(ValueError, match="does not fit one Modbus read"):
        RegisterMap(make_pump(ring_capacity=11))
    assert RegisterMap(make_pump(ring_capacity=10)).ring_read_count <= 125


def test_config_snippet_carries_both_protocols_and_round_trips_as_yaml(pump: Controller) -> None:
    cfg = device_config(
        pump,
        modbus={"host": "127.0.0.1", "port": 15020, "unit": 1},
        register_map=RegisterMap(pump),
        opcua={"endpoint": "opc.tcp://127.0.0.1:48400/sim/"},
        nodes=NodeLayout(pump),
    )
    loaded = yaml.safe_load(config_yaml([cfg]))["devices"][0]
    assert loaded == cfg
    assert loaded["boot_id"] == {"register": 0, "type": "uint32", "node": "ns=2;s=PUMP-07.BootId"}
    ovl = loaded["channels"]["Overload"]
    assert ovl["transition_id"] == {
        "register": 18,
        "type": "uint16",
        "node": "ns=2;s=PUMP-07.Overload.TransitionId",
    }
    assert ovl["state"]["values"] == {0: "Off", 1: "On", 2: "Locked"}
    ring = loaded["ring"]
    assert ring["read"] == {"register": 100, "count": 100}
    assert ring["slots"]["fields"]["boot_id"] == {
        "offset": 6,
        "type": "uint32",
        "node": "ns=2;s=PUMP-07.Ring.BootId",
    }
    assert [list(c) for c in loaded["connections"]] == [["modbus"], ["opcua"]]
