"""What a reloaded configuration changes against the one in force (operator.md section 5).

Pure: two `Config` objects in, a `Changes` out; the service applies it (`agent.service.reload`).

- A device or upstream is *unchanged* when every setting is equal, its place in the files
  aside (moving an entry, or adding one above it, changes no line of what it does): it keeps
  running untouched, its connections open.
- *Added*, *removed* and *changed* ones are started, stopped and restarted.
- Settings the running service takes as they are (`status_every`, `store.commit_interval`,
  `store.write_budget`) are *applied*; those only a new process can take (the store's path,
  durability, size and retention, the metrics endpoint) are *pending a restart*, as PostgreSQL
  says of its own: the rest of the reload goes on.
- A change of identity is *refused* with its reason unless forced: the site (every event's
  source), the gateway (the fleet's key and the topics), a device renamed (a device removed and
  one added that reads the same PLC address) and a channel renamed (an existing device that
  loses one channel name and gains another). They change what the events are called, which
  deserves a restart and a thought. Forced, a renamed device or channel is what the file says,
  a removal and an addition, and a new site or gateway restarts every device and upstream.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.config.loader import Config
from agent.config.sources import Channel, Device
from agent.config.sparkplug import AnyUpstream, SparkplugUpstream

# Where a setting was written, not what it does (Channel.path is the key path of its `window`).
_PLACE_FIELDS = {"line", "file"}
_CHANNEL_PLACE_FIELDS = _PLACE_FIELDS | {"path"}

_LIVE_SETTINGS = ("status_every", "store.commit_interval", "store.write_budget")
_RESTART_SETTINGS = (
    "store.path",
    "store.synchronous",
    "store.max_size",
    "store.reserve",
    "store.retention",
    "metrics",
)


def _setting(cfg: Config, key: str) -> Any:
    """The value of a dotted top-level setting, e.g. ``store.commit_interval``."""
    value: Any = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


@dataclass(frozen=True)
class Changes:
    """One reload's plan; names in the order of the new configuration (removed: of the old)."""

    devices_added: tuple[str, ...] = ()
    devices_removed: tuple[str, ...] = ()
    devices_changed: tuple[str, ...] = ()
    devices_unchanged: tuple[str, ...] = ()
    upstreams_added: tuple[str, ...] = ()
    upstreams_removed: tuple[str, ...] = ()
    upstreams_changed: tuple[str, ...] = ()
    upstreams_unchanged: tuple[str, ...] = ()
    applied: tuple[str, ...] = ()  # settings the running service takes now
    pending_restart: tuple[str, ...] = ()  # settings that wait for the next start
    refused: tuple[str, ...] = ()  # identity changes, each with its reason

    @property
    def nothing(self) -> bool:
        """True when the reload starts, stops and applies nothing."""
        moving = (
            self.devices_added,
            self.devices_removed,
            self.devices_changed,
            self.upstreams_added,
            self.upstreams_removed,
            self.upstreams_changed,
            self.applied,
        )
        return not any(moving)

    def summary(self) -> str:
        """One line for the log and `status`, e.g. ``devices: +PLC-11 -PLC-03 ~PLC-04, 9 unchanged``."""
        parts = [
            _part(
                "devices",
                self.devices_added,
                self.devices_removed,
                self.devices_changed,
                self.devices_unchanged,
            ),
            _part(
                "upstreams",
                self.upstreams_added,
                self.upstreams_removed,
                self.upstreams_changed,
                self.upstreams_unchanged,
            ),
        ]
        if self.applied:
            parts.append("applied " + ", ".join(self.applied))
        if self.pending_restart:
            parts.append("pending a restart: " + ", ".join(self.pending_restart))
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _part(
    what: str, added: Sequence[str], removed: Sequence[str], changed: Sequence[str], same: Sequence[str]
) -> str:
    marks = [f"+{n}" for n in added] + [f"-{n}" for n in removed] + [f"~{n}" for n in changed]
    return f"{what}: {' '.join(marks) or 'no change'}, {len(same)} unchanged"


def compare(old: Config, new: Config, *, force: bool = False) -> Changes:
    """The plan that takes the service from `old` to `new` (see the module's text)."""
    refused = _identity_refusals(old, new)
    everything = bool(force and (old.site != new.site or old.gateway != new.gateway))
    dev = _split(
        {d.name: d for d in old.devices}, {d.name: d for d in new.devices}, _comparable, everything=everything
    )
    ups = _split(
        {u.name: (u, _birth_layout(u, old)) for u in old.upstreams},
        {u.name: (u, _birth_layout(u, new)) for u in new.upstreams},
        _comparable,
        everything=everything,
    )
    return Changes(
        *dev,
        *ups,
        applied=tuple(k for k in _LIVE_SETTINGS if _setting(old, k) != _setting(new, k)),
        pending_restart=tuple(
            k for k in _RESTART_SETTINGS if _comparable(_setting(old, k)) != _comparable(_setting(new, k))
        ),
        refused=() if force else tuple(refused),
    )


def _split(
    old: Mapping[str, Any], new: Mapping[str, Any], key: Any, *, everything: bool
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    added = tuple(n for n in new if n not in old)
    removed = tuple(n for n in old if n not in new)
    kept = [n for n in new if n in old]
    changed = tuple(n for n in kept if everything or key(old[n]) != key(new[n]))
    unchanged = tuple(n for n in kept if n not in changed)
    return added, removed, changed, unchanged


def _identity_refusals(old: Config, new: Config) -> list[str]:
    out: list[str] = []
    if old.site != new.site:
        out.append(f"site changes from {old.site!r} to {new.site!r}: every event's source changes")
    if old.gateway != new.gateway:
        out.append(
            f"gateway changes from {old.gateway!r} to {new.gateway!r}: the fleet's key and the topics change"
        )
    before = {d.name: d for d in old.devices}
    after = {d.name: d for d in new.devices}
    gone = [d for n, d in before.items() if n not in after]
    came = [d for n, d in after.items() if n not in before]
    for d in came:
        for g in gone:
            if shared := sorted(_receivers(d) & _receivers(g)):
                out.append(
                    f"device {g.name!r} looks renamed to {d.name!r} (both read {shared[0]}): "
                    "its events would change source"
                )
    for name in (n for n in after if n in before):
        lost = _channel_names(before[name]) - _channel_names(after[name])
        new_names = _channel_names(after[name]) - _channel_names(before[name])
        if lost and new_names:
            was, now = ", ".join(sorted(lost)), ", ".join(sorted(new_names))
            out.append(
                f"device {name!r}: channel {was} replaced by {now}: "
                "a renamed channel's events would change source"
            )
    return out


def _birth_layout(u: AnyUpstream, cfg: Config) -> Any:
    """What a Sparkplug upstream announces in its births (every device and its channels): a change
    there restarts it, so that its DBIRTHs say what is polled. Other upstreams: nothing."""
    if not isinstance(u, SparkplugUpstream):
        return None
    return tuple((d.name, tuple(c.name for c in d.channels)) for d in cfg.devices)


def _receivers(d: Device) -> set[str]:
    return {c.receiver for c in d.connections}


def _channel_names(d: Device) -> set[str]:
    return {c.name for c in d.channels}


def _comparable(value: Any) -> Any:
    """`value` as nested tuples of what it does: dataclasses by their fields without the places
    they were written at, mappings sorted, sequences in order."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        skip = _CHANNEL_PLACE_FIELDS if isinstance(value, Channel) else _PLACE_FIELDS
        fields = tuple(
            (f.name, _comparable(getattr(value, f.name)))
            for f in dataclasses.fields(value)
            if f.name not in skip
        )
        return (type(value).__name__, fields)
    if isinstance(value, Mapping):
        return tuple(sorted(((repr(k), _comparable(v)) for k, v in value.items()), key=lambda kv: kv[0]))
    if isinstance(value, set | frozenset):
        return tuple(sorted(repr(_comparable(v)) for v in value))
    if isinstance(value, list | tuple):
        return tuple(_comparable(v) for v in value)
    return value
