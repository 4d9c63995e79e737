"""Window keys for channels without a transition counter (pure; contract section 8, opt in).

A channel with a state and no counter (a coil, a status word) may opt in with
``identity: window`` and a ``window`` duration. Each state change the poller observes is then
delivered with ``transitionId = w:<new state>:<floor(observed / window)>``, the observed time
being the controller's own time of the change when the map has one, otherwise the read time.
The bootId comes from the controller as always: without one the delivery is
``identity_incomplete`` and no window key stands in for a generation.

This is the domain key of the dedup seed (same subject, same type, same time window: the same
event), with its cost written down: two real changes to the same state inside one window are
one event, and two reads of one change that straddle a window boundary are two. Nothing here
reads a clock: the caller passes the observed time.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agent.core.basis import IdentityBasis
from agent.core.contract import Delivery
from agent.core.jcs import canonical_json
from agent.core.snapshot import ChannelRead, Snapshot, boot_raw, live_delivery
from agent.core.timestamps import parse_timestamp

PREFIX = "w"


def state_text(state: Any) -> str:
    """The state as it stands in the key: text as is, a whole number in decimal, else canonical JSON.

    The same rule as an id (contract section 1: ``91`` and ``"91"`` are the same), so one
    controller read over Modbus (a number, or its configured name) and over OPC UA gives one key
    when both paths name the state the same way.
    """
    if isinstance(state, str):
        return state
    if isinstance(state, int) and not isinstance(state, bool):
        return str(state)
    return canonical_json(state)


def window_index(observed: str, window_ms: int) -> int:
    """``floor(observed / window)``, both in milliseconds since the Unix epoch.

    ``observed`` is contract text (RFC 3339 with offset, read with millisecond precision);
    integer arithmetic, so a boundary is exact and never moved by float rounding.
    """
    if window_ms <= 0:
        raise ValueError(f"a window must be longer than zero, not {window_ms} ms")
    dt = parse_timestamp(observed, "observed time")
    epoch_ms = _epoch_ms(dt.toordinal(), dt.hour, dt.minute, dt.second, dt.microsecond // 1000)
    return epoch_ms // window_ms


def _epoch_ms(ordinal: int, hour: int, minute: int, second: int, ms: int) -> int:
    days = ordinal - 719163  # date(1970, 1, 1).toordinal()
    return ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + ms


def _instant(text: str) -> datetime:
    return parse_timestamp(text, "source time")


def window_key(state: Any, observed: str, window_ms: int) -> str:
    """The transitionId of one observed change: ``w:<state>:<window index>``.

    The index is the last ``:``-separated part and never holds a ``:``, so a state name with a
    colon stays unambiguous.
    """
    return f"{PREFIX}:{state_text(state)}:{window_index(observed, window_ms)}"


class WindowChanges:
    """Change detection of the window channels of one device over one connection (no I/O).

    A window channel is delivered when its state differs from the last state this tracker
    read. The first read after the agent starts is delivered only when the controller gives the
    time of the change (``source_timestamp``) and that time is not older than the latest source
    time the store holds for the channel (``recorded``, read at start): newer is a change made
    while the agent was away (a new event), the same time is a re-read (a ``duplicate``), an
    older one is no change the store lacks (it already holds something later) and is only the
    baseline. Without a change time the first read is only a baseline too: the read time is not
    the time of the change, and a key made from it would invent a new event at every start of
    the agent. A failed read keeps the last state.
    """

    def __init__(self, device: str, recorded: Mapping[str, str] | None = None) -> None:
        self.device = device
        self.last: dict[str, str] = {}
        self.recorded = dict(recorded or {})

    def observe(self, snap: Snapshot, ch: ChannelRead, notes: list[str] | None = None) -> Delivery | None:
        """The delivery of ``ch`` (a window channel) when its state changed, else None."""
        assert ch.window_ms is not None
        if ch.error is not None:
            return None
        state = state_text(ch.state)
        previous = self.last.get(ch.channel)
        self.last[ch.channel] = state
        if previous == state or (previous is None and ch.source_timestamp is None):
            return None
        changed = ch.source_timestamp
        if previous is None and changed is not None and self._older(ch.channel, changed):
            if notes is not None:
                notes.append(
                    f"{ch.channel}: first read shows {state} changed at {ch.source_timestamp}, older than "
                    f"the last event the store holds ({self.recorded[ch.channel]}): a baseline, not an event"
                )
            return None
        observed = ch.source_timestamp or snap.read_at
        window = {
            "ms": ch.window_ms,
            "observed": observed,
            "observed_from": "source_timestamp" if ch.source_timestamp else "read time",
            "previous_state": previous,
        }
        raw = {"read": dict(ch.raw), "boot": boot_raw(snap), "window": window}
        key = window_key(ch.state, observed, ch.window_ms)
        return live_delivery(self.device, ch, snap, key, raw, IdentityBasis.WINDOW)

    def _older(self, channel: str, source_timestamp: str) -> bool:
        """Whether ``source_timestamp`` is older than the latest the store holds for ``channel``."""
        recorded = self.recorded.get(channel)
        return recorded is not None and _instant(source_timestamp) < _instant(recorded)
