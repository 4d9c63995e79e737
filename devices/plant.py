"""A simulated plant: controllers plus the servers that expose them, kept in step.

Every model change goes through the plant (or is followed by :meth:`Plant.sync`) so both
paths show it: one Modbus server per controller (a PLC's own Ethernet port; ports
``modbus_port``, ``modbus_port + 1``, ... or all free ones with 0) and one OPC UA server
for all controllers (one asyncua server per controller would cost ~2 s of start-up each).
The same Controller object behind both servers is what makes "one PLC over two paths".
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from devices.agent_config import config_yaml, device_config
from devices.controller import Controller, RingEntry
from devices.modbus_map import WordOrder
from devices.modbus_server import ModbusSimServer
from devices.opcua_nodes import NAMESPACE
from devices.opcua_server import OpcUaSecurity, OpcUaSimServer
from devices.scenario import RandomLoad, Step, apply_model_step


class Plant:
    def __init__(
        self,
        controllers: list[Controller],
        *,
        host: str = "127.0.0.1",
        modbus_port: int | None = 0,
        opcua_port: int | None = 0,
        word_order: WordOrder = "big",
        security: OpcUaSecurity | None = None,
        poll: str = "250ms",
    ) -> None:
        """``modbus_port=None`` / ``opcua_port=None`` leave that protocol out."""
        self.controllers = {c.name: c for c in controllers}
        self.poll = poll
        self.modbus: dict[str, ModbusSimServer] = {}
        if modbus_port is not None:
            for i, ctrl in enumerate(controllers):
                port = modbus_port + i if modbus_port else 0
                self.modbus[ctrl.name] = ModbusSimServer(ctrl, host=host, port=port, word_order=word_order)
        self.opcua = (
            OpcUaSimServer(controllers, host=host, port=opcua_port, security=security)
            if opcua_port is not None
            else None
        )

    async def start(self) -> None:
        for server in self.modbus.values():
            await server.start()
        if self.opcua is not None:
            await self.opcua.start()

    async def stop(self) -> None:
        for server in self.modbus.values():
            await server.stop()
        if self.opcua is not None:
            await self.opcua.stop()

    async def __aenter__(self) -> Plant:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def sync(self) -> None:
        """Push every controller's changes to every server."""
        for server in self.modbus.values():
            await server.sync()
        if self.opcua is not None:
            await self.opcua.sync()

    async def transition(self, device: str, channel: str | int, state: int | None = None) -> RingEntry:
        entry = self.controllers[device].transition(channel, state)
        await self.sync()
        return entry

    async def restart(self, device: str, *, clock_jump_ms: int = 0, down_seconds: float = 0.0) -> int | None:
        """Reboot one controller: its Modbus connections drop and the boot id changes.

        The OPC UA server is restarted too (new StartTime) when it serves only this controller,
        as a PLC's embedded server would be; a shared server just shows the new values.
        """
        ctrl = self.controllers[device]
        if device in self.modbus:
            boot = await self.modbus[device].restart(down_seconds=down_seconds, clock_jump_ms=clock_jump_ms)
        else:
            boot = ctrl.restart(clock_jump_ms=clock_jump_ms)
        if self.opcua is not None and len(self.controllers) == 1:
            await self.opcua.restart_server()
        await self.sync()
        return boot

    async def cut_link(self, device: str) -> None:
        """Cut every path to ``device`` (the shared OPC UA server goes down for all devices)."""
        if device in self.modbus:
            await self.modbus[device].cut_link()
        if self.opcua is not None:
            await self.opcua.cut_link()

    async def restore_link(self, device: str) -> None:
        if device in self.modbus:
            await self.modbus[device].restore_link()
        if self.opcua is not None:
            await self.opcua.restore_link()
        await self.sync()

    def half_open(self, device: str) -> None:
        """Modbus only: in-process OPC UA cannot be frozen; run ``python -m devices`` and SIGSTOP it."""
        self.modbus[device].half_open()

    async def run_steps(self, steps: Iterable[Step]) -> None:
        """Run scenario steps in order; faults with ``seconds`` end by themselves."""
        for step in steps:
            if apply_model_step(self.controllers, step):
                await self.sync()
            elif step.action == "wait":
                await asyncio.sleep(float(step.options["seconds"]))
            elif step.action == "cut":
                await self.cut_link(step.device)
                await asyncio.sleep(float(step.options.get("seconds", 1.0)))
                await self.restore_link(step.device)
            elif step.action == "half_open":
                self.half_open(step.device)
                await asyncio.sleep(float(step.options.get("seconds", 1.0)))
                await self.modbus[step.device].restore_link()
            elif step.action == "slow":
                self.modbus[step.device].set_delay(float(step.options.get("delay", 0.5)))
                await asyncio.sleep(float(step.options.get("seconds", 1.0)))
                self.modbus[step.device].set_delay(0.0)

    async def run_random(self, rate: float, *, seed: int = 0, stop: asyncio.Event | None = None) -> int:
        """Random transitions at ``rate`` per second until ``stop`` is set; returns how many."""
        load, done = RandomLoad(list(self.controllers.values()), rate, seed=seed), 0
        stop = stop or asyncio.Event()
        while not stop.is_set():
            delay, ctrl, channel = load.next()
            try:
                await asyncio.wait_for(stop.wait(), delay)
                break
            except TimeoutError:
                pass
            ctrl.transition(channel)
            await self.sync()
            done += 1
        return done

    def device_configs(self) -> list[dict[str, Any]]:
        """The agent's ``devices:`` entries for this plant, with the ports actually bound."""
        out = []
        for name, ctrl in self.controllers.items():
            mb = self.modbus.get(name)
            opcua: dict[str, Any] | None = None
            if self.opcua is not None:
                opcua = {"endpoint": self.opcua.endpoint}
                secure = [p for p in self.opcua.security.policies if p != "None"]
                if secure:
                    policy, mode = secure[-1].split("_")
                    opcua["security"] = {"policy": policy, "mode": mode}
                else:  # the agent is secure by default: an insecure endpoint must be said explicitly
                    opcua["security"] = {"policy": "None"}
            out.append(
                device_config(
                    ctrl,
                    modbus={"host": mb.host, "port": mb.port, "unit": mb.unit} if mb else None,
                    register_map=mb.map if mb else None,
                    opcua=opcua,
                    nodes=self.opcua.layout(ctrl) if self.opcua else None,
                    poll=self.poll,
                )
            )
        return out

    def config_yaml(self) -> str:
        return config_yaml(self.device_configs())

    def endpoints(self) -> dict[str, Any]:
        return {
            "modbus": {n: {"host": s.host, "port": s.port, "unit": s.unit} for n, s in self.modbus.items()},
            "opcua": None
            if self.opcua is None
            else {"endpoint": self.opcua.endpoint, "namespace": NAMESPACE},
        }
