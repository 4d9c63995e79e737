"""The two alarm servers the scenarios run against, behind one face.

``simulator``: the project's asyncua simulator (``devices.opcua_server``), whose alarm side and
ConditionRefresh are our own code. ``node-opcua``: node-opcua 2.186.4's own conditions, EventIds
and ConditionRefresh (``peers/node/opcua_alarms_server.js``), a stack no one here wrote.

What differs is said here, not hidden: node-opcua loses every condition on a restart and never
reuses an EventId (16 random bytes per process plus a counter), so the "keep alarms" and
"reuse EventIds" restarts exist only on the simulator.
"""

from __future__ import annotations

from typing import Protocol

from devices.controller import ChannelSpec, Controller
from devices.opcua_server import OpcUaSimServer
from devices.peers.node_alarms import NodeOpcUaAlarms

PLC = "PLC-1"
CONDITIONS = ["HighTemp", "LowLevel"]


class AlarmPeer(Protocol):
    name: str
    source_name: str  # the SourceName of the controller's condition events

    @property
    def port(self) -> int: ...

    def refreshes(self) -> list[int]: ...  # subscription ids whose ConditionRefresh was answered

    def refused(self) -> list[str]: ...  # the status of every refused ConditionRefresh

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def reset(self, event_ids: str) -> None: ...

    async def alarm(self, condition: str, action: str) -> str: ...  # its EventId as hex

    def last_time_ms(self, condition: str) -> int: ...

    async def lose(self, condition: str, action: str) -> None: ...  # a transition whose event is lost

    async def refresh_required(self) -> None: ...

    async def refuse(self, status: str) -> None: ...

    async def restart(self, *, keep: bool) -> None: ...


class SimulatorPeer:
    name = "simulator"
    source_name = PLC

    def __init__(self) -> None:
        self.server = OpcUaSimServer([Controller(PLC, [ChannelSpec("Trip")])])

    @property
    def port(self) -> int:
        return self.server.port

    def refreshes(self) -> list[int]:
        return self.server.alarms.refreshes

    def refused(self) -> list[str]:
        return [str(self.server.alarms.refuse_refresh)] * len(self.server.alarms.refused)

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()

    async def reset(self, event_ids: str) -> None:
        assert event_ids in ("unique", "counter")
        self.server.reset_alarms("counter" if event_ids == "counter" else "unique")

    async def alarm(self, condition: str, action: str) -> str:
        return (await self.server.alarm(PLC, condition, action)).event_id.hex()

    def last_time_ms(self, condition: str) -> int:
        last = self.server.alarm_book.condition(PLC, condition).last
        assert last is not None
        return last.time_ms

    async def lose(self, condition: str, action: str) -> None:
        self.server.alarm_book.act(PLC, condition, action)

    async def refresh_required(self) -> None:
        await self.server.alarms.refresh_required()

    async def refuse(self, status: str) -> None:
        self.server.alarms.refuse_refresh = status

    async def restart(self, *, keep: bool) -> None:
        await self.server.restart_server(keep_alarms=keep)


class NodeOpcUaPeer:
    name = "node-opcua"
    source_name = f"2:{PLC}"  # node-opcua sends the qualified BrowseName, namespace index included

    def __init__(self) -> None:
        self.server = NodeOpcUaAlarms(PLC, CONDITIONS)

    @property
    def port(self) -> int:
        return self.server.port

    def refreshes(self) -> list[int]:
        return self.server.refreshes

    def refused(self) -> list[str]:
        return [status for _, status in self.server.refused]

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()

    async def reset(self, event_ids: str) -> None:
        assert event_ids == "unique", "node-opcua makes its own EventIds (never reused)"
        await self.server.reset()
        self.server.refreshes.clear()
        self.server.refused.clear()

    async def alarm(self, condition: str, action: str) -> str:
        return (await self.server.alarm(condition, action)).event_id.hex()

    def last_time_ms(self, condition: str) -> int:
        return self.server.last[condition].time_ms

    async def lose(self, condition: str, action: str) -> None:
        await self.server.lose(condition, action)

    async def refresh_required(self) -> None:
        await self.server.refresh_required()

    async def refuse(self, status: str) -> None:
        await self.server.refuse_refresh(status)

    async def restart(self, *, keep: bool) -> None:
        assert not keep, "node-opcua loses every condition on a restart"
        await self.server.restart()
