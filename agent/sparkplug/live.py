"""What a Sparkplug upstream shows in `status` and the metrics, and the DBIRTH of one device
from the store's live values (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.sparkplug import mapping
from agent.sparkplug.payload import PbPayload, payload

DeviceValues = tuple[list[tuple[str, str | None, str | None]], str | None, str | None]


@dataclass
class SparkplugState:
    """Live state of one Sparkplug upstream (this run). `in_window`: rows published and
    waiting for their window of 2 x keepalive before they count as delivered."""

    upstream: str
    kind: str = "sparkplug"
    up: bool | None = None
    connected: bool = False
    primary_host: str | None = None
    primary_host_online: bool | None = None
    bd_seq: int | None = None
    births: int = 0
    rebirths: int = 0
    breaks: int = 0
    published: int = 0
    delivered: int = 0
    in_window: int = 0
    bad_commands: int = 0
    failures: int = 0
    last_error: str | None = None


def device_birth_metrics(device: str, values: DeviceValues, now: int) -> tuple[PbPayload, frozenset[str]]:
    """The DBIRTH of `device` (its metrics as a Payload message) and the `<channel>/State`
    names it declares."""
    states, boot_id, boot_at = values
    live = mapping.DeviceLive(
        device,
        tuple((ch, _label(payload), at) for ch, payload, at in states),
        boot_id,
        boot_at,
    )
    metrics = mapping.device_birth(live, now)
    declared = frozenset(f"{ch}{mapping.STATE_SUFFIX}" for ch, _, _ in states)
    return payload(metrics), declared


def _label(payload_json: str | None) -> str | None:
    return None if payload_json is None else mapping.state_label(payload_json)
