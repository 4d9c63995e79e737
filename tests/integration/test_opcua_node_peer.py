"""The OPC UA poller against node-opcua 2.186.4 (issue 28): transitions on a server no one here wrote.

``peers/node/opcua_server.js`` (the subscription bench's server) serves the node layout of
devices/opcua_nodes.py for one controller (boot id 17, channel Trip, a ring of 8, one
TransitionEventType event per transition). The real OPC UA source reads it with plain polled
reads and with subscriptions plus reconcile; three transitions in one write (P6 with a ring:
the ring supplies what the counter skipped) and three more one by one must all be recorded,
nothing named missing. A server restart as a new boot (P11 with P2: the process killed and
started again on the same endpoint) and a counter reset within a boot (P8/P17, the ``reset``
stdin command) are recorded as against the simulator, and a server offering only
Basic256Sha256 SignAndEncrypt delivers. One node-opcua server per test (start-up
2-6 s; the restart test starts a second one after the first ended). Skips with the reason
without Node.js or ``peers/node``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from agent.config import loader as config
from agent.core.errors import SourceUnavailable
from agent.sources.opcua.poller import OpcUaSource
from agent.sources.opcua.trust import describe, read_certificate
from devices.agent_config import device_config
from devices.controller import ChannelSpec, Controller
from devices.opcua_nodes import NodeLayout
from devices.peers import node_missing
from devices.peers.node_opcua import NodeOpcUa
from devices.pki import make_test_pki

pytestmark = pytest.mark.timeout(90)

NAME = "PLC-UA"
TRIP = f"{NAME}/Trip"


@pytest_asyncio.fixture
async def node_server(tmp_path: Path) -> AsyncIterator[NodeOpcUa]:
    if (why := node_missing()) is not None:
        pytest.skip(why)
    server = NodeOpcUa(NAME, str(tmp_path / "pki"))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def load_devices(tmp_path: Path, entry: dict[str, Any]) -> Any:
    doc = {"site": "plant-1", "gateway": "gw", "store": {"path": str(tmp_path / "s.db")}, "devices": [entry]}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return config.load(path).devices


@pytest.mark.parametrize("subscribe", [False, True], ids=["polled reads", "subscription with reconcile"])
async def test_transitions_on_node_opcua_are_all_recorded_polled_or_subscribed(
    node_server: NodeOpcUa,
    agent_for: Any,
    wait_until: Any,
    subscribe: bool,
    tmp_path: Path,
) -> None:
    ctrl = Controller(NAME, [ChannelSpec("Trip")], ring_capacity=8)
    opcua = {"endpoint": node_server.endpoint, "security": {"policy": "None"}, "subscribe": subscribe}
    entry = device_config(ctrl, opcua=opcua, nodes=NodeLayout(ctrl), poll="100ms")
    if subscribe:
        entry["connections"][0]["opcua"]["reconcile"] = "1s"
    devices = load_devices(tmp_path, entry)

    async def recorded(n: int) -> bool:
        return len(await view.events()) >= n

    async with agent_for(devices) as view:
        await asyncio.sleep(1.0)  # the first read (the baseline) before anything changes
        await node_server.burst(3, 3)  # T1..T3 in one write: the counter jumps, the ring has them
        await wait_until(lambda: recorded(3), timeout=30)
        for _ in range(3):
            await node_server.burst(1, 1)
            await asyncio.sleep(0.3)
        await wait_until(lambda: recorded(6), timeout=30)
        assert await view.keys() == {(TRIP, str(t), "17") for t in range(1, 7)}
        assert await view.anomalies(gaps=True) == []
        assert await view.anomalies(gaps=False) == []
        assert [b["bootId"] for b in await view.boots()] == ["17"]


async def test_a_node_opcua_server_restart_as_a_new_boot_is_observed_and_keys_the_new_transitions(
    node_server: NodeOpcUa, agent_for: Any, wait_until: Any, tmp_path: Path
) -> None:
    # P11 and P2 together: the subscribed agent reconnects by itself to the restarted process,
    # records BootObserved (18, previous 17) naming the node, and keys what follows under 18.
    ctrl = Controller(NAME, [ChannelSpec("Trip")], ring_capacity=8)
    opcua = {"endpoint": node_server.endpoint, "security": {"policy": "None"}, "subscribe": True}
    entry = device_config(ctrl, opcua=opcua, nodes=NodeLayout(ctrl), poll="100ms")
    entry["connections"][0]["opcua"].update({"reconcile": "1s", "timeout": "1s"})
    entry["backoff"] = {"initial": "100ms", "max": "500ms"}

    async def has(*keys: tuple[str, str, str]) -> bool:
        return set(keys) <= await view.keys()

    async with agent_for(load_devices(tmp_path, entry)) as view:
        await asyncio.sleep(1.0)  # the baseline read first
        await node_server.burst(2, 1)
        await wait_until(lambda: has((TRIP, "1", "17"), (TRIP, "2", "17")), timeout=30)
        before = await view.events()
        await node_server.restart(boot_id=18)
        await asyncio.sleep(1.0)  # the agent reconnects and reads boot 18 before it changes
        await node_server.burst(1, 1)
        await wait_until(lambda: has((TRIP, "1", "18")), timeout=30)
        assert await view.keys() == {(TRIP, "1", "17"), (TRIP, "2", "17"), (TRIP, "1", "18")}
        boots = await view.boots()
        assert [(b["bootId"], b["previous_bootId"]) for b in boots] == [("17", None), ("18", "17")]
        assert boots[1]["evidence"]["node"].endswith(f";s={NAME}.BootId")
        assert "server_start_time" in boots[1]["evidence"]
        after = {(e["transitionId"], e["bootId"]): e["payload"] for e in await view.events()}
        assert all(after[(e["transitionId"], e["bootId"])] == e["payload"] for e in before)  # not re-keyed
        assert await view.anomalies(gaps=True) == []


async def test_a_counter_reset_on_node_opcua_is_a_reset_anomaly_and_a_conflict(
    node_server: NodeOpcUa, agent_for: Any, wait_until: Any, tmp_path: Path
) -> None:
    # P8/P17 as tests/integration/test_counter_reset.py: T3 -> 0 -> T1 again (other state and
    # source time) within boot 17: a `reset` anomaly, the store decides `conflict`, both kept.
    ctrl = Controller(NAME, [ChannelSpec("Trip")])
    opcua = {"endpoint": node_server.endpoint, "security": {"policy": "None"}}
    entry = device_config(ctrl, opcua=opcua, nodes=NodeLayout(ctrl), poll="100ms")
    entry.pop("ring", None)
    entry.pop("events", None)

    async with agent_for(load_devices(tmp_path, entry)) as view:

        async def stored(tid: str) -> bool:
            return (TRIP, tid, "17") in await view.keys()

        async def booted() -> bool:
            return bool(await view.boots())

        async def reset_seen() -> bool:
            return any(a["kind"] == "reset" for a in await view.anomalies(gaps=False))

        async def conflicted() -> bool:
            return any(a["decision"] == "conflict" for a in await view.arrivals())

        await wait_until(booted, timeout=30)
        for tid in ("1", "2", "3"):
            await node_server.burst(1, 1)
            await wait_until(lambda t=tid: stored(t), timeout=30)
        first = next(e for e in await view.events() if e["transitionId"] == "1")
        await node_server.command("reset 0")
        await wait_until(reset_seen, timeout=30)
        await node_server.burst(1, 1)  # T1 again, other state and source time
        await wait_until(conflicted, timeout=30)
        event = next(e for e in await view.events() if e["transitionId"] == "1")
        anomalies = await view.anomalies(gaps=False)
    assert (event["status"], event["conflict_count"]) == ("DuplicateConflict", 1)
    assert event["payload"] == first["payload"]  # the canonical keeps the first content
    assert [(a["kind"], a["from"], a["to"]) for a in anomalies] == [("reset", "3", "0")]


async def secure_node_server(
    tmp_path: Path, *, reject_unknown_clients: bool = False
) -> tuple[Any, NodeOpcUa]:
    """A node-opcua server offering only Basic256Sha256 SignAndEncrypt with devices/pki.py's
    server certificate, and the test PKI (its trusted client is the agent's certificate)."""
    if (why := node_missing()) is not None:
        pytest.skip(why)
    pki = await make_test_pki(tmp_path / "certs")
    cert_pem = tmp_path / "server_cert.pem"
    cert = x509.load_der_x509_certificate(pki.server.certificate.read_bytes())
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    tls = (str(cert_pem), str(pki.server.private_key))
    server = NodeOpcUa(NAME, str(tmp_path / "pki"), tls=tls, reject_unknown_clients=reject_unknown_clients)
    await server.start()
    return pki, server


def secure_device(pki: Any, server: NodeOpcUa, **entry: Any) -> dict[str, Any]:
    """The device's config: SignAndEncrypt with the agent's certificate, the server's pinned."""
    security = {
        "policy": "Basic256Sha256",
        "mode": "SignAndEncrypt",
        "certificate": str(pki.trusted_client.certificate),
        "private_key": str(pki.trusted_client.private_key),
        "server_certificate": str(pki.server.certificate),
    }
    ctrl = Controller(NAME, [ChannelSpec("Trip")], ring_capacity=8)
    opcua = {"endpoint": server.endpoint, "security": security}
    return device_config(ctrl, opcua=opcua, nodes=NodeLayout(ctrl), **entry)


async def test_basic256sha256_sign_and_encrypt_against_node_opcua_delivers(
    agent_for: Any, wait_until: Any, tmp_path: Path
) -> None:
    # The server offers only Basic256Sha256 SignAndEncrypt with devices/pki.py's server
    # certificate, pinned by the agent; the agent's own certificate is accepted by node-opcua.
    pki, server = await secure_node_server(tmp_path)
    try:
        entry = secure_device(pki, server, poll="100ms")
        async with agent_for(load_devices(tmp_path, entry)) as view:

            async def booted() -> bool:
                return bool(await view.boots())

            await wait_until(booted, timeout=30)
            await server.burst(2, 1)

            async def both() -> bool:
                return {(TRIP, "1", "17"), (TRIP, "2", "17")} <= await view.keys()

            await wait_until(both, timeout=30)
            assert await view.keys() == {(TRIP, "1", "17"), (TRIP, "2", "17")}
            assert all(a["receiver"].startswith("opcua:") for a in await view.arrivals())
    finally:
        await server.stop()


async def test_node_opcua_refusing_our_certificate_is_an_unavailable_link_that_says_so(
    tmp_path: Path,
) -> None:
    # node-opcua with automaticallyAcceptUnknownCertificate off: the agent's certificate is not in
    # its trusted folder, so the secure channel is refused. The agent must not crash, not record,
    # and say what the PLC's administrator has to do.
    pki, server = await secure_node_server(tmp_path, reject_unknown_clients=True)
    try:
        entry = secure_device(pki, server)
        dev = load_devices(tmp_path, entry)[0]
        src = OpcUaSource(dev, dev.connections[0])  # type: ignore[arg-type]
        with pytest.raises(SourceUnavailable) as err:
            await src.connect()
        await src.close()
        ours = describe(read_certificate(pki.trusted_client.certificate))
        text = str(err.value)
        assert text.startswith("refused: ") and "not trust the agent's certificate" in text, text
        assert ours.thumbprint in text and ours.subject in text, text
        # The PLC administrator's step: node-opcua filed our certificate under rejected/; trusted now.
        for _ in range(100):  # node-opcua writes the file beside its answer, not before it
            if found := list((tmp_path / "pki" / "rejected").glob("*.pem")):
                break
            await asyncio.sleep(0.1)
        (rejected,) = found
        rejected.rename(tmp_path / "pki" / "trusted" / "certs" / rejected.name)
        # node-opcua reads its trusted folder when it starts; its file watcher may notice a moved
        # file much later on a loaded machine (over 90 s in a CI run), so the server is restarted
        # on the same endpoint, as an administrator would, and the same source connects again.
        await server.restart(boot_id=17)
        for _ in range(100):
            try:
                await src.connect()
                break
            except SourceUnavailable:
                await src.close()
                await asyncio.sleep(0.2)
        else:
            pytest.fail("never connected after the certificate was trusted and the server restarted")
        try:
            await server.burst(1, 1)
            obs = await src.poll()
        finally:
            await src.close()
        assert [(d.source, d.transition_id) for d in obs.deliveries] == [(TRIP, "1")]
    finally:
        await server.stop()
