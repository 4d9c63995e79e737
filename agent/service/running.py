"""What runs between READY and the end of the stop sequence, each device and upstream on its own.

Every device (its connections' pollers) and every upstream (its forwarder) has a stop event of its
own, so a reload (`agent.service.reload`) can start, stop or restart one while the others keep
running untouched: their tasks, connections and ticks are never looked at. The service's stop
sets them all, in its order (`agent.service.run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field

from agent.config.sources import Device
from agent.core.live import ServiceLive
from agent.core.tracker import Resume
from agent.service.recorder import Recorder
from agent.service.shutdown import StopBudget, StopSequence
from agent.service.supervisor import Supervisor
from agent.service.upstream_tasks import UpstreamTask
from agent.sources.pollers import run_device
from agent.store.reader import Reader
from agent.store.store import Store

log = logging.getLogger(__name__)


@dataclass
class _Part:
    """One device's or upstream's task and the event that stops it."""

    task: asyncio.Task[None]
    stop: asyncio.Event


@dataclass
class Running:
    """The running service's tasks. `forwarders` is the list the commit hook wakes and the status
    loop reports: a reload changes it in place."""

    tg: asyncio.TaskGroup
    store: Store
    recorder: Recorder
    supervisor: Supervisor
    live: ServiceLive
    budget: StopBudget
    forwarders: list[UpstreamTask] = field(default_factory=list)
    devices: dict[str, _Part] = field(default_factory=dict)
    upstreams: dict[str, _Part] = field(default_factory=dict)
    stop_recorder: asyncio.Event = field(default_factory=asyncio.Event)
    stop_house: asyncio.Event = field(default_factory=asyncio.Event)
    recorder_tasks: list[asyncio.Task[None]] = field(default_factory=list)
    house_tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start_device(self, device: Device, resume: Resume | None) -> None:
        """Poll `device` (each connection in its own supervised task) from `resume`."""
        stop = asyncio.Event()
        polling = run_device(
            device,
            self.recorder,
            stop,
            self.live,
            resume=resume,
            supervise=self.supervisor.run,
            alarm_memory=self.store.read_alarm_memory,
        )
        name = f"device[{device.name}]"
        self.devices[device.name] = _Part(self.tg.create_task(polling, name=name), stop)

    async def stop_device(self, name: str) -> None:
        """Stop one device's polling (a poll in flight finishes and is handed to the recorder) and
        forget its live state; what it recorded stays in the store."""
        part = self.devices.pop(name)
        part.stop.set()
        await StopSequence(self.budget).wait_tasks([part.task], self.budget.pollers_s, f"device {name}")
        self.live.connections[:] = [c for c in self.live.connections if c.device != name]
        self._forget_tasks(f"poller[{name} ")

    def start_upstream(self, forwarder: UpstreamTask) -> None:
        """Forward to one upstream until its stop; drains for the budget's `drain_s` at the end."""
        stop = asyncio.Event()
        name = forwarder.upstream.name
        label = f"forwarder[{name}]"

        def forward() -> Awaitable[None]:
            return forwarder.run(stop, drain_s=self.budget.drain_s)

        task = self.tg.create_task(self.supervisor.run(label, forward, stop), name=label)
        self.forwarders.append(forwarder)
        self.upstreams[name] = _Part(task, stop)

    async def stop_upstream(self, name: str) -> None:
        """Stop one forwarder (it settles what is in flight) and close its sink. Its outbox rows stay
        in the store: the upstream is still registered there (`edge-agent outbox` shows them)."""
        part = self.upstreams.pop(name)
        part.stop.set()
        budget = self.budget
        await StopSequence(budget).wait_tasks([part.task], budget.forwarders_s, f"upstream {name}")
        gone = [f for f in self.forwarders if f.upstream.name == name]
        self.forwarders[:] = [f for f in self.forwarders if f.upstream.name != name]
        for f in gone:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(f.sink.close(), budget.close_s)
        self._forget_tasks(f"forwarder[{name}]")

    def device_tasks(self) -> list[asyncio.Task[None]]:
        return [p.task for p in self.devices.values()]

    def upstream_tasks(self) -> list[asyncio.Task[None]]:
        return [p.task for p in self.upstreams.values()]

    def stop_polling(self) -> None:
        for p in self.devices.values():
            p.stop.set()

    def stop_forwarding(self) -> None:
        for p in self.upstreams.values():
            p.stop.set()

    def _forget_tasks(self, prefix: str) -> None:
        tasks = self.supervisor.tasks
        tasks[:] = [t for t in tasks if not t.name.startswith(prefix)]


async def resume_points(path: str, devices: Sequence[str]) -> dict[str, Resume]:
    """Where each device's pollers resume, read from the store on a read-only connection."""
    async with await Reader.open(path) as reader:
        points = await reader.resume_points(devices)
    for device, p in points.items():
        if p.boot is not None:
            log.info(
                "resuming device=%s boot_id=%s positions=%s ring_head=%s",
                device,
                p.boot,
                ",".join(f"{ch}:{tid}" for ch, tid in sorted(p.counters.items())) or "-",
                p.ring_head,
            )
    return points
