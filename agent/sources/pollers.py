"""Wiring of the pollers: one source and one task per configured connection.

Holds the source factory and the task tree of devices and connections. It must not read a
controller itself or know the store: observations go to the sink it is given.

What a service calls::

    recorder = Recorder(store)                        # agent.service.recorder: the one writer task
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(recorder.run(stop_recorder), name="recorder")
        tg.create_task(run_pollers(config.devices, recorder, stop), name="pollers")

Every connection runs in its own task (``poller[PUMP-07 modbus:10.10.0.7:502]``), so a dead
or slow controller only ever delays itself. ``run_pollers`` returns when ``stop`` is set and
every source has closed; then stop the recorder, which commits what is queued.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, assert_never

from agent.config.sources import Connection, Device, ModbusRtu, ModbusTcp, OpcUa
from agent.core.alarms import AlarmMemoryReader
from agent.core.live import ConnectionLive, ServiceLive
from agent.core.tracker import Resume
from agent.sources.base import ObservationSink, Source, run_source
from agent.sources.modbus.poller import ModbusSource
from agent.sources.opcua.poller import OpcUaSource

# Runs one connection's loop under supervision: (task name, start the loop, stop) -> until done.
Supervise = Callable[[str, Callable[[], Awaitable[None]], asyncio.Event], Coroutine[Any, Any, None]]


async def _unsupervised(_name: str, start: Callable[[], Awaitable[None]], _stop: asyncio.Event) -> None:
    await start()


def build_source(
    device: Device,
    conn: Connection,
    resume: Resume | None = None,
    alarm_memory: AlarmMemoryReader | None = None,
) -> Source:
    """The source of one connection; its tracker starts from ``resume`` (what the store holds),
    its alarm tracking (OPC UA) from ``alarm_memory``."""
    match conn:
        case ModbusTcp() | ModbusRtu():
            return ModbusSource(device, conn, resume=resume)
        case OpcUa():
            return OpcUaSource(device, conn, resume=resume, alarm_memory=alarm_memory)
        case _:
            assert_never(conn)


async def run_device(
    device: Device,
    sink: ObservationSink,
    stop: asyncio.Event,
    live: ServiceLive | None = None,
    *,
    resume: Resume | None = None,
    supervise: Supervise = _unsupervised,
    alarm_memory: AlarmMemoryReader | None = None,
) -> None:
    """Poll every connection of one device until ``stop``; one task per connection."""
    sources: list[Source] = []
    try:
        await _run_connections(device, sink, stop, live, resume, supervise, alarm_memory, sources)
    finally:
        for source in sources:  # their slots in the poll interval (agent.sources.schedule)
            release = getattr(source, "release", None)
            if release is not None:
                release()


async def _run_connections(
    device: Device,
    sink: ObservationSink,
    stop: asyncio.Event,
    live: ServiceLive | None,
    resume: Resume | None,
    supervise: Supervise,
    alarm_memory: AlarmMemoryReader | None,
    sources: list[Source],
) -> None:
    async with asyncio.TaskGroup() as tg:
        for conn in device.connections:
            source = build_source(device, conn, resume, alarm_memory)
            sources.append(source)
            name = f"poller[{device.name} {conn.receiver}]"

            def start(source: Source = source) -> Awaitable[None]:
                # The same source (and tracker) across restarts: what it read is not forgotten.
                return run_source(
                    source,
                    sink,
                    stop,
                    backoff_initial=device.backoff_initial,
                    backoff_max=device.backoff_max,
                    live=_live_of(live, device, source.receiver),
                )

            tg.create_task(supervise(name, start, stop), name=name)


async def run_pollers(
    devices: Sequence[Device],
    sink: ObservationSink,
    stop: asyncio.Event,
    live: ServiceLive | None = None,
    *,
    resume: Mapping[str, Resume] | None = None,
    supervise: Supervise = _unsupervised,
    alarm_memory: AlarmMemoryReader | None = None,
) -> None:
    """Poll every device until ``stop``. `live` (optional) collects per-connection state;
    `resume` (per device) is where each tracker starts; `supervise` wraps each connection;
    `alarm_memory` (optional, the store's) tells OPC UA alarm sources what they saw before."""
    async with asyncio.TaskGroup() as tg:
        for device in devices:
            point = (resume or {}).get(device.name)
            run = run_device(
                device, sink, stop, live, resume=point, supervise=supervise, alarm_memory=alarm_memory
            )
            tg.create_task(run, name=f"device[{device.name}]")


def _live_of(live: ServiceLive | None, device: Device, receiver: str) -> ConnectionLive | None:
    """The connection's live state, knowing its poll interval (to count the ticks it misses)."""
    if live is None:
        return None
    conn = live.connection(device.name, receiver)
    conn.period_s = device.poll
    return conn
