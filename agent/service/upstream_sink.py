"""The sink for one configured upstream (one case per upstream type), and the clock it is given."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import assert_never

from agent.config.upstreams import HttpUpstream, MqttUpstream, Upstream
from agent.sinks.base import Sink
from agent.sinks.http import HttpSink
from agent.sinks.mqtt import MqttSink

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(UTC)


def build_sink(upstream: Upstream, *, site: str, gateway: str, clock: Clock = system_clock) -> Sink:
    """The sink for one configured upstream."""
    match upstream:
        case MqttUpstream():
            return MqttSink(upstream, site=site, gateway=gateway)
        case HttpUpstream():
            return HttpSink(upstream, clock=clock)
        case _:
            assert_never(upstream)
