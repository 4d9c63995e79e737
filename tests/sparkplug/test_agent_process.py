"""`edge-agent run` as a real process with a `sparkplug:` upstream, a simulated PLC (Modbus),
a real Mosquitto and the independent Node.js host: kill -9 of the agent (the host sees the
Will, and the next bdSeq is the previous + 1), a lost PLC link (DDEATH, then DBIRTH), a PLC
restart (Events/BootObserved, the new Device Info/Boot Id); every transition the PLC made
reaches the host at least once, under one canonicalId."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent_process import agent_env, start_agent, write_config
from sparkplug_parts import Broker, Host, event_metrics
from sparkplug_scenario import GROUP, NODE, needs_parts

from devices.controller import ChannelSpec, Controller
from devices.plant import Plant

pytestmark = [needs_parts(), pytest.mark.timeout(120)]


def ignition(url: str) -> dict[str, Any]:
    """The Sparkplug upstream of these tests' configuration."""
    return {"name": "ignition", "sparkplug": {"url": url, "group_id": GROUP, "keepalive": "2s"}}


def verb(v: str, device: str | None = None):  # type: ignore[no-untyped-def]
    return lambda e: e.get("verb") == v and (device is None or e.get("device") == device)


def bd_seq(msg: dict[str, Any]) -> int:
    return int(next(m["value"] for m in msg["metrics"] if m["name"] == "bdSeq"))


def seen_ids(host: Host) -> list[str]:
    return [
        m["properties"]["canonicalId"]["value"]
        for m in event_metrics(host.messages("DDATA"), "Events/Transition")
    ]


async def test_kill_9_link_loss_and_plc_restart(tmp_path: Path, broker: Broker, host: Host) -> None:
    ctrl = Controller("PUMP-07", [ChannelSpec("Trip")], ring_capacity=8)
    async with Plant([ctrl], opcua_port=None) as plant:
        config = write_config(tmp_path, plant, NODE, ignition(broker.url))
        log = tmp_path / "agent.log"
        agent = await start_agent(config, log)
        try:
            births = await host.until(verb("NBIRTH"), timeout=30)
            first = bd_seq(births[0])
            await host.until(verb("DBIRTH", "PUMP-07"))
            made = []
            for _ in range(3):
                made.append(await plant.transition("PUMP-07", "Trip"))
                await asyncio.sleep(0.15)
            await host.until(lambda e: e.get("verb") == "DDATA", count=3, timeout=20)
            # kill -9: the broker publishes the Will, NDEATH with this connection's bdSeq
            agent.kill()
            await agent.wait()
            deaths = await host.until(verb("NDEATH"), timeout=15)
            assert bd_seq(deaths[0]) == first
            for _ in range(2):  # the PLC goes on while the agent is away (its ring keeps them)
                made.append(await plant.transition("PUMP-07", "Trip"))
            agent = await start_agent(config, log)
            births = await host.until(verb("NBIRTH"), count=2, timeout=30)
            assert bd_seq(births[1]) == first + 1
            boot = ctrl.boot_id
            wanted = {f"{boot}:{e.transition_id}" for e in made}
            await _until(lambda: wanted <= set(seen_ids(host)))
            # `status` shows the session: connected, bdSeq, rows waiting for their window
            for _ in range(50):  # the service writes its live state every 2 s
                live = (await _status(config))["service"]["upstreams"]["ignition"]
                if live["connected"] and live["bd_seq"] == first + 1:
                    break
                await asyncio.sleep(0.2)
            assert live["kind"] == "sparkplug" and live["connected"] is True and live["bd_seq"] == first + 1
            assert live["in_window"] >= 0 and live["primary_host"] is None
            # a lost PLC link is a DDEATH; when it is back, a DBIRTH
            await plant.cut_link("PUMP-07")
            await host.until(verb("DDEATH", "PUMP-07"), timeout=30)
            await plant.restore_link("PUMP-07")
            await host.until(verb("DBIRTH", "PUMP-07"), count=3, timeout=30)
            # a PLC restart: Events/BootObserved and the new Device Info/Boot Id
            await plant.restart("PUMP-07")
            new_boot = ctrl.boot_id
            await _until(
                lambda: any(
                    m["value"] == str(new_boot)
                    for m in event_metrics(host.messages("DDATA"), "Device Info/Boot Id")
                ),
                timeout=30,
            )
            boots = event_metrics(host.messages("DDATA"), "Events/BootObserved")
            assert boots[-1]["properties"]["bootId"]["value"] == str(new_boot)
        finally:
            if agent.returncode is None:
                agent.terminate()
                await agent.wait()
        # every transition reached the host at least once; repeats carry the same canonicalId
        ids = seen_ids(host)
        assert wanted <= set(ids)
        await host.until(verb("NDEATH"), count=2)  # the graceful stop says NDEATH too


async def _status(config: Path) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent",
        "status",
        "-c",
        str(config),
        "--json",
        stdout=asyncio.subprocess.PIPE,
        env=agent_env(),
    )
    out, _ = await proc.communicate()
    return dict(json.loads(out))


async def test_check_probe_reports_the_primary_host_and_publishes_nothing(
    tmp_path: Path, broker: Broker
) -> None:
    host = Host(broker.url, GROUP, host_id="scada-1")
    try:
        ctrl = Controller("PUMP-07", [ChannelSpec("Trip")], ring_capacity=8)
        async with Plant([ctrl], opcua_port=None) as plant:
            config = write_config(tmp_path, plant, NODE, ignition(broker.url))
            doc = yaml.safe_load(config.read_text())
            doc["upstreams"][0]["sparkplug"]["primary_host_id"] = "scada-1"
            config.write_text(yaml.safe_dump(doc))
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agent",
                "check",
                "-c",
                str(config),
                "--probe",
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=agent_env(),
            )
            out = (await proc.communicate())[0].decode()
        assert proc.returncode == 0, out
        assert "primary host scada-1 online; nothing published" in out
        await asyncio.sleep(0.3)
        assert host.messages() == []
    finally:
        host.close()


async def _until(cond, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.05)
