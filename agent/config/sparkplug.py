"""Typed settings of a Sparkplug B upstream (spec sparkplug.md section 2). No YAML, no secrets.

```yaml
upstreams:
  - name: ignition
    sparkplug:
      url: "mqtts://broker.plant:8883"     # same URL, TLS, credential and secret-file keys as mqtt:
      group_id: plant-1
      edge_node_id: gw-line3               # default: the top-level `gateway`
      primary_host_id: ignition-1          # optional: births wait for that host's STATE online
      state_v22: false                     # also accept Sparkplug 2.2 `STATE/<id>` ONLINE/OFFLINE
      keepalive: 30s
```
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from agent.config.upstreams import (
    BACKFILLS,
    Backfill,
    Backoff,
    MqttClientSettings,
    Upstream,
    mqtt_url_problems,
    tls_problems,
    url_problems,
)

SPARKPLUG_FORBIDDEN = frozenset("+/#")


@dataclass(frozen=True, slots=True)
class SparkplugUpstream(MqttClientSettings):
    """An MQTT broker spoken to as a Sparkplug B 3.0 edge node.

    Data goes out at QoS 0 (Sparkplug's rule) and no host acknowledges it: a row counts as
    delivered once published and then `2 x keepalive` passed with the session unbroken
    (`window_s`); a break re-sends the rows of that window, flagged historical.

    url:            `mqtt://host[:1883]` or `mqtts://host[:8883]`.
    group_id:       the Sparkplug group (required).
    edge_node_id:   the edge node id; None: the configuration's `gateway`.
    primary_host_id: when set, births and data only while that host's STATE says online.
    state_v22:      also accept a Sparkplug 2.2 host's `STATE/<id>` ONLINE/OFFLINE.
    keepalive_s:    MQTT keepalive; the delivery window is twice this.
    ca_file, cert_file, key_file, username, password_file, client_id: as for `mqtt:` (MqttClientSettings).
    read_size:      outbox rows read per database transaction.
    """

    name: str
    url: str
    group_id: str = ""
    edge_node_id: str | None = None
    primary_host_id: str | None = None
    state_v22: bool = False
    keepalive_s: float = 30.0
    read_size: int = 500
    connect_timeout_s: float = 10.0
    backoff: Backoff = field(default_factory=Backoff)
    backfill: Backfill = "none"

    @property
    def window_s(self) -> float:
        """W: how long a published row waits, session unbroken, before it counts as delivered."""
        return 2 * self.keepalive_s

    def node_id(self, gateway: str) -> str:
        return self.edge_node_id or gateway

    def problems(self) -> list[str]:
        out = url_problems(self.url)
        if not self.name or "/" in self.name:
            out.append(f"name: {self.name!r} must be a non-empty name without '/'")
        out += mqtt_url_problems(self.url)
        if not self.group_id:
            out.append("group_id: is required (the Sparkplug group of this edge node)")
        for key in ("group_id", "edge_node_id", "primary_host_id"):
            value = getattr(self, key)
            if value and SPARKPLUG_FORBIDDEN & set(value):
                out.append(f"{key}: {value!r} must not contain + / or #")
        if not isinstance(self.state_v22, bool):
            out.append("state_v22: must be true or false")
        if self.keepalive_s < 1:
            out.append("keepalive: must be at least 1s")
        if self.read_size < 1:
            out.append("read_size: must be at least 1")
        if self.backfill not in BACKFILLS:
            out.append(f"backfill: {self.backfill!r} must be none or all")
        return out + tls_problems(self.cert_file, self.key_file) + self.login_problems()


AnyUpstream = Upstream | SparkplugUpstream


def sparkplug_node_problems(up: SparkplugUpstream, before: Sequence[AnyUpstream], gateway: str) -> list[str]:
    """Two Sparkplug upstreams with one edge node id (on one broker they would knock each other
    off; on two, one edge node would be connected twice). The gateway stands in when unset."""
    node = up.node_id(gateway)
    out = [
        f"edge node id {node!r} is also used by upstream {other.name!r}; give each its own edge_node_id"
        for other in before
        if isinstance(other, SparkplugUpstream) and other.node_id(gateway) == node
    ]
    if SPARKPLUG_FORBIDDEN & set(node):
        out.append(f"edge node id {node!r} (default: the gateway) must not contain + / or #")
    return out
