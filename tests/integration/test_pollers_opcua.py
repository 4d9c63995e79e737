"""OPC UA pollers (and one PLC over both paths) against the devices/ simulators, into real SQLite."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devices.controller import ChannelSpec, Controller
from devices.opcua_server import OpcUaSecurity
from devices.pki import make_test_pki
from devices.plant import Plant

pytestmark = pytest.mark.timeout(60)

TRIP = "PUMP-07/Trip"


def pump() -> Controller:
    return Controller("PUMP-07", [ChannelSpec("Trip")])


def subscribed(entry: dict[str, Any]) -> None:
    for conn in entry["connections"]:
        if "opcua" in conn:
            conn["opcua"].update({"subscribe": True, "reconcile": "1s", "timeout": "1s"})
    entry["backoff"] = {"initial": "100ms", "max": "500ms"}


async def test_one_plc_over_modbus_and_opcua_gives_one_canonical_per_transition_with_both_arrivals(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any
) -> None:
    async with Plant([pump()], poll="50ms") as plant, agent_for(devices_of(plant)) as view:
        for _ in range(2):
            await plant.transition("PUMP-07", "Trip")
            n = len(await view.arrivals()) + 2
            await wait_until(lambda n=n: _arrivals(view, n))
        events = await view.events()
        assert [(e["transitionId"], e["duplicate_count"], e["conflict_count"]) for e in events] == [
            ("1", 1, 0),
            ("2", 1, 0),
        ]
        arrivals = await view.arrivals()
        for tid in ("1", "2"):
            mine = [a for a in arrivals if a["transitionId"] == tid]
            assert sorted(a["decision"] for a in mine) == ["duplicate", "inserted"]
            assert {a["receiver"].split(":")[0] for a in mine} == {"modbus", "opcua"}


async def test_an_opcua_server_restart_while_subscribed_still_delivers_every_transition(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any
) -> None:
    ctrl = pump()
    async with (
        Plant([ctrl], modbus_port=None, poll="1s") as plant,
        agent_for(devices_of(plant, subscribed)) as view,
    ):
        await plant.transition("PUMP-07", "Trip")
        await wait_until(lambda: _has(view, (TRIP, "1", "17")))
        assert plant.opcua is not None
        await plant.opcua.cut_link()
        ctrl.transition("Trip")
        ctrl.transition("Trip")
        await plant.opcua.restore_link()  # new ServerStatus/StartTime, a new session
        await wait_until(lambda: _has(view, (TRIP, "2", "17"), (TRIP, "3", "17")))
        await plant.transition("PUMP-07", "Trip")
        await wait_until(lambda: _has(view, (TRIP, "4", "17")))
        assert await view.keys() == {(TRIP, str(t), "17") for t in range(1, 5)}
        assert await view.anomalies(gaps=True) == []
        starts = {_raw(a).get("server_start_time") for a in await view.arrivals()} - {None}
        assert len(starts) == 2  # StartTime before and after the restart is in the evidence


async def test_a_controller_restart_over_opcua_gives_a_boot_observed_naming_the_node_and_start_time(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any
) -> None:
    async with (
        Plant([pump()], modbus_port=None, poll="50ms") as plant,
        agent_for(devices_of(plant, subscribed)) as view,
    ):
        await plant.transition("PUMP-07", "Trip")
        await wait_until(lambda: _has(view, (TRIP, "1", "17")))
        await plant.restart("PUMP-07")
        await plant.transition("PUMP-07", "Trip")
        await wait_until(lambda: _has(view, (TRIP, "1", "18")))
        boots = await view.boots()
        assert [(b["bootId"], b["previous_bootId"]) for b in boots] == [("17", None), ("18", "17")]
        assert boots[1]["evidence"]["node"] == "ns=2;s=PUMP-07.BootId"
        assert "server_start_time" in boots[1]["evidence"]


async def test_a_secure_connection_with_client_certificate_and_password_file_delivers(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any, tmp_path: Path
) -> None:
    pki = await make_test_pki(tmp_path / "pki")
    security = OpcUaSecurity(
        policies=("Basic256Sha256_SignAndEncrypt",),
        certificate=pki.server.certificate,
        private_key=pki.server.private_key,
        trusted_dir=pki.trusted_dir,
        users={"agent": "s3cret"},
    )
    password = tmp_path / "opcua-password"
    password.write_text("s3cret\n", encoding="utf-8")

    def secure(entry: dict[str, Any]) -> None:
        conn = entry["connections"][0]["opcua"]
        conn["security"].update(
            certificate=str(pki.trusted_client.certificate),
            private_key=str(pki.trusted_client.private_key),
            server_certificate=str(pki.server.certificate),
        )
        conn.update(username="agent", password_file=str(password))

    async with (
        Plant([pump()], modbus_port=None, security=security, poll="50ms") as plant,
        agent_for(devices_of(plant, secure)) as view,
    ):
        await plant.transition("PUMP-07", "Trip")
        await wait_until(lambda: _has(view, (TRIP, "1", "17")), timeout=20)
        assert (await view.arrivals())[0]["receiver"].startswith("opcua:")


def _raw(arrival: dict[str, Any]) -> dict[str, Any]:
    import json

    value: dict[str, Any] = json.loads(arrival["raw"])
    return value


async def _arrivals(view: Any, n: int) -> bool:
    return len(await view.arrivals()) >= n


async def _has(view: Any, *keys: tuple[str, str, str]) -> bool:
    return set(keys) <= await view.keys()


async def test_a_namespace_uri_the_server_does_not_serve_is_named_with_the_servers_array(
    devices_of: Callable[..., Any],
) -> None:
    from agent.core.errors import SourceUnavailable
    from agent.sources.opcua.poller import OpcUaSource

    def wrong_namespace(entry: dict[str, Any]) -> None:
        entry["namespace"] = "urn:plant-1:pumps"

    async with Plant([pump()], modbus_port=None, poll="1s") as plant:
        [device] = devices_of(plant, wrong_namespace)
        source = OpcUaSource(device, device.connections[0])
        try:
            with pytest.raises(SourceUnavailable) as err:
                await source.connect()
        finally:
            await source.close()
    text = str(err.value)
    assert text.startswith("namespace URI 'urn:plant-1:pumps' is not in the server's namespace array (")
    assert "[0] http://opcfoundation.org/UA/" in text and "urn:edge-agent:sim" in text
    assert "not in list" not in text and "decoded" not in text


async def _burst(plant: Plant, ctrl: Controller, writes: int) -> None:
    """`writes` times a ring's worth of transitions (4) at once, about 3 ms apart: faster than
    the agent's reads, so reads see counters ahead of the events received."""
    for _ in range(writes):
        for _ in range(4):  # at most a ring's worth per write: the simulator emits one event each
            ctrl.transition("Trip")
        await plant.sync()
        await asyncio.sleep(0.003)


async def test_a_subscribed_burst_faster_than_the_ring_is_delivered_by_events_with_no_gap_recorded(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any
) -> None:
    # A read triggered by a data change answers with counters (and a ring head) ahead of the
    # events received so far: the server sends those with its next publish. The read must be
    # judged after them, else what they deliver is recorded as a gap or an overrun.
    ctrl = Controller("PUMP-07", [ChannelSpec("Trip")], ring_capacity=4)
    async with (
        Plant([ctrl], modbus_port=None, poll="1s") as plant,
        agent_for(devices_of(plant, subscribed)) as view,
    ):
        await plant.transition("PUMP-07", "Trip")
        await wait_until(lambda: _has(view, (TRIP, "1", "17")))
        await _burst(plant, ctrl, 60)
        want = {(TRIP, str(t), "17") for t in range(1, 242)}
        await wait_until(lambda: _has(view, *want))
        assert await view.keys() == want
        assert await view.anomalies(gaps=True) == []
        assert await view.anomalies(gaps=False) == []


async def test_a_restart_inside_a_subscribed_burst_is_recorded_from_the_read_with_its_evidence(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any
) -> None:
    # A read held for its events must not let the new boot's events be recorded before the
    # read that shows the new boot: BootObserved keeps the read's evidence (the node).
    ctrl = Controller("PUMP-07", [ChannelSpec("Trip")], ring_capacity=4)
    async with (
        Plant([ctrl], modbus_port=None, poll="1s") as plant,
        agent_for(devices_of(plant, subscribed)) as view,
    ):
        await plant.transition("PUMP-07", "Trip")
        await wait_until(lambda: _has(view, (TRIP, "1", "17")))
        for restart in (False, True):
            if restart:
                ctrl.restart()  # the server stays up: the same session sees boot 18 begin
            await _burst(plant, ctrl, 30)
        want = {(TRIP, str(t), "17") for t in range(1, 122)} | {(TRIP, str(t), "18") for t in range(1, 121)}
        await wait_until(lambda: _has(view, *want))
        assert await view.keys() == want
        boots = await view.boots()
        assert [(b["bootId"], b["previous_bootId"]) for b in boots] == [("17", None), ("18", "17")]
        assert boots[1]["evidence"]["node"] == "ns=2;s=PUMP-07.BootId"
        assert [a for a in await view.anomalies(gaps=False) if a["bootId"] == "17"] == []
