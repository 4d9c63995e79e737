"""Topics, the primary host's STATE and NCMD, read by the rules of Sparkplug 3.0 (pure).

STATE (3.0): `spBv1.0/STATE/<host_id>`, JSON `{"online": bool, "timestamp": ms}`, QoS 1,
retained. A STATE counts only when its timestamp is not older than the last one counted (the
first seen counts). Sparkplug 2.2 hosts publish `STATE/<host_id>` with the text `ONLINE` or
`OFFLINE` (no timestamp): accepted only when `state_v22` is on, always in arrival order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from agent.sparkplug.mapping import REBIRTH
from agent.sparkplug.payload import DataType, decode, metrics_of

NAMESPACE = "spBv1.0"


def topic(group: str, verb: str, node: str, device: str | None = None) -> str:
    base = f"{NAMESPACE}/{group}/{verb}/{node}"
    return base if device is None else f"{base}/{device}"


def state_topic(host_id: str) -> str:
    return f"{NAMESPACE}/STATE/{host_id}"


def state_topic_v22(host_id: str) -> str:
    return f"STATE/{host_id}"


@dataclass
class HostState:
    """What this edge node believes of its primary host (None: nothing seen yet)."""

    online: bool | None = None
    timestamp: int | None = None  # of the last STATE counted (3.0)
    ignored: int = 0  # STATE messages not counted (malformed or older than the last)

    def seen(self, topic_name: str, payload: bytes, *, v22: bool) -> bool | None:
        """Count one STATE message; returns the new `online` when it counted, else None."""
        if topic_name.startswith(f"{NAMESPACE}/STATE/"):
            try:
                doc = json.loads(payload)
                online, ts = doc["online"], doc["timestamp"]
            except (ValueError, KeyError, TypeError):
                self.ignored += 1
                return None
            if type(online) is not bool or type(ts) is not int:
                self.ignored += 1
                return None
            if self.timestamp is not None and ts < self.timestamp:
                self.ignored += 1
                return None
            self.online, self.timestamp = online, ts
            return online
        if v22 and topic_name.startswith("STATE/"):
            text = payload.decode(errors="replace").strip()
            if text not in ("ONLINE", "OFFLINE"):
                self.ignored += 1
                return None
            self.online = text == "ONLINE"
            return self.online
        self.ignored += 1
        return None


def rebirth_requested(payload: bytes) -> bool:
    """An NCMD asks for a rebirth: a metric `Node Control/Rebirth` with the Boolean true.
    A payload that is not Sparkplug, or holds other metrics only, asks for nothing (raises
    DecodeError for the former, so the caller can log it)."""
    return any(
        m.name == REBIRTH
        and m.value is True
        and m.type in (DataType.BOOLEAN, DataType.STRING, DataType.BYTES)
        for m in metrics_of(decode(payload))
    )
