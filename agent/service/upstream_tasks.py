"""The upstream tasks of the service: a `Forwarder` through a sink for `mqtt:` and `http:`, a
`SparkplugForwarder` for `sparkplug:`; both drain the same outbox. Only this module knows
which kind gets which; the service, its status and its stop see `UpstreamTask`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from agent.config.loader import Config
from agent.config.sparkplug import SparkplugUpstream
from agent.core.live import ServiceLive
from agent.service.forwarder import Forwarder
from agent.service.upstream_sink import build_sink
from agent.sparkplug.forwarder import SparkplugForwarder
from agent.store.store import Store


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class _Closable(Protocol):
    async def close(self) -> None: ...


class UpstreamTask(Protocol):
    """What the service runs per upstream: `run()` until stopped, `wake()` after a commit,
    `state` (a dataclass) for status and metrics, `sink.close()` at the end."""

    @property
    def upstream(self) -> _Named: ...
    @property
    def state(self) -> Any: ...
    @property
    def sink(self) -> _Closable: ...
    def wake(self) -> None: ...
    async def run(self, stop: asyncio.Event, *, drain_s: float = ...) -> None: ...


def build_upstream_tasks(store: Store, cfg: Config, live: ServiceLive) -> list[UpstreamTask]:
    out: list[UpstreamTask] = []
    devices = [(d.name, tuple(c.name for c in d.channels)) for d in cfg.devices]
    for u in cfg.upstreams:
        if isinstance(u, SparkplugUpstream):
            out.append(
                SparkplugForwarder(
                    store, u, site=cfg.site, gateway=cfg.gateway, devices=devices, link_up=link_of(live)
                )
            )
        else:
            sink = build_sink(u, site=cfg.site, gateway=cfg.gateway)
            out.append(Forwarder(store, sink, u, site=cfg.site, gateway=cfg.gateway))
    return out


def link_of(live: ServiceLive) -> Any:
    """A device's PLC link from the service's live connections: up when any connection is up,
    down when every one is unavailable, None (not known) while connecting."""

    def link_up(device: str) -> bool | None:
        states = [c.state for c in live.connections if c.device == device]
        if any(s == "up" for s in states):
            return True
        if states and all(s == "unavailable" for s in states):
            return False
        return None

    return link_up


def names(tasks: Sequence[UpstreamTask]) -> list[str]:
    return [t.upstream.name for t in tasks]
