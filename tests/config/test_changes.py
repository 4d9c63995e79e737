"""What a reload changes (agent.config.changes): table-driven over edits of one configuration."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import loader
from agent.config.changes import Changes, compare


def device(name: str, host: str, *channels: str) -> dict[str, Any]:
    chans = {
        ch: {"transition_id": {"register": 10 + 10 * i, "type": "uint32"}, "state": {"register": 12 + 10 * i}}
        for i, ch in enumerate(channels or ("Trip",))
    }
    return {
        "name": name,
        "connections": [{"modbus": {"host": host, "port": 502, "unit": 1}}],
        "poll": "250ms",
        "boot_id": {"register": 0, "type": "uint32"},
        "channels": chans,
    }


BASE: dict[str, Any] = {
    "site": "plant-1",
    "gateway": "gw-1",
    "store": {"path": "/tmp/never-opened.db"},
    "upstreams": [
        {
            "name": "central",
            "mqtt": {"url": "mqtt://broker:1883", "topic": "{site}/events/{device}/{channel}"},
        },
        {"name": "historian", "http": {"url": "http://historian/ingest"}},
    ],
    "devices": [device("PUMP-07", "10.0.0.7", "Trip"), device("FAN-01", "10.0.0.8", "Trip", "Overload")],
}


def load(tmp_path: Path, doc: dict[str, Any], name: str) -> loader.Config:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return loader.load(path, check_files=False)


def edit(fn: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    fn(doc)
    return doc


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def go(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        at = doc
        for p in parents:
            at = at.setdefault(p, {})
        at[last] = value

    return go


def _device_poll(doc: dict[str, Any]) -> None:
    doc["devices"][1]["poll"] = "1s"


def _add_device(doc: dict[str, Any]) -> None:
    doc["devices"].append(device("VALVE-3", "10.0.0.9"))


def _remove_device(doc: dict[str, Any]) -> None:
    del doc["devices"][0]


def _reorder_and_comment(doc: dict[str, Any]) -> None:
    doc["devices"].reverse()  # every device on other lines, none changed


def _rename_device(doc: dict[str, Any]) -> None:
    doc["devices"][0]["name"] = "PUMP-7"


def _rename_channel(doc: dict[str, Any]) -> None:
    chans = doc["devices"][1]["channels"]
    chans["OverLoad"] = chans.pop("Overload")


def _add_channel(doc: dict[str, Any]) -> None:
    doc["devices"][0]["channels"]["Fault"] = {
        "transition_id": {"register": 30, "type": "uint32"},
        "state": {"register": 32},
    }


def _upstream_topic(doc: dict[str, Any]) -> None:
    doc["upstreams"][0]["mqtt"]["topic"] = "{site}/ev/{device}/{channel}"


def _drop_upstream(doc: dict[str, Any]) -> None:
    del doc["upstreams"][1]


CASES: list[tuple[str, Callable[[dict[str, Any]], None], dict[str, Any]]] = [
    ("nothing", lambda d: None, {"devices_unchanged": ("PUMP-07", "FAN-01"), "nothing": True}),
    ("moved entries", _reorder_and_comment, {"devices_unchanged": ("FAN-01", "PUMP-07"), "nothing": True}),
    ("a device's poll", _device_poll, {"devices_changed": ("FAN-01",), "devices_unchanged": ("PUMP-07",)}),
    (
        "a device added",
        _add_device,
        {"devices_added": ("VALVE-3",), "devices_unchanged": ("PUMP-07", "FAN-01")},
    ),
    ("a device removed", _remove_device, {"devices_removed": ("PUMP-07",), "devices_unchanged": ("FAN-01",)}),
    ("a channel added", _add_channel, {"devices_changed": ("PUMP-07",)}),
    (
        "an upstream's topic",
        _upstream_topic,
        {"upstreams_changed": ("central",), "upstreams_unchanged": ("historian",)},
    ),
    ("an upstream removed", _drop_upstream, {"upstreams_removed": ("historian",), "devices_changed": ()}),
    ("status_every", _set("status_every", "30s"), {"applied": ("status_every",), "nothing": False}),
    ("commit_interval", _set("store.commit_interval", "1s"), {"applied": ("store.commit_interval",)}),
    (
        "the store's path",
        _set("store.path", "/tmp/other.db"),
        {"pending_restart": ("store.path",), "nothing": True},
    ),
    ("metrics", _set("metrics", {"listen": "127.0.0.1:9108"}), {"pending_restart": ("metrics",)}),
]


@pytest.mark.parametrize(("what", "change", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_reload_moves_only_what_changed(
    tmp_path: Path, what: str, change: Callable[[dict[str, Any]], None], expected: dict[str, Any]
) -> None:
    old = load(tmp_path, BASE, "old.yaml")
    new = load(tmp_path, edit(change), "new.yaml")
    changes = compare(old, new)
    assert changes.refused == ()
    for key, value in expected.items():
        assert getattr(changes, key) == value, (what, key, changes)


REFUSED: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("site", _set("site", "plant-2"), "site changes from 'plant-1' to 'plant-2'"),
    ("gateway", _set("gateway", "gw-2"), "gateway changes from 'gw-1' to 'gw-2'"),
    ("a device renamed", _rename_device, "device 'PUMP-07' looks renamed to 'PUMP-7'"),
    ("a channel renamed", _rename_channel, "device 'FAN-01': channel Overload replaced by OverLoad"),
]


@pytest.mark.parametrize(("what", "change", "reason"), REFUSED, ids=[c[0] for c in REFUSED])
def test_an_identity_change_is_refused_unless_forced(
    tmp_path: Path, what: str, change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    old = load(tmp_path, BASE, "old.yaml")
    new = load(tmp_path, edit(change), "new.yaml")
    refused = compare(old, new).refused
    assert len(refused) == 1 and refused[0].startswith(reason), refused
    forced = compare(old, new, force=True)
    assert forced.refused == ()
    assert not forced.nothing


def test_a_forced_site_restarts_every_device_and_upstream(tmp_path: Path) -> None:
    old = load(tmp_path, BASE, "old.yaml")
    forced = compare(old, load(tmp_path, edit(_set("site", "plant-2")), "new.yaml"), force=True)
    assert forced.devices_changed == ("PUMP-07", "FAN-01") and forced.devices_unchanged == ()
    assert forced.upstreams_changed == ("central", "historian")


def test_a_forced_rename_is_a_removal_and_an_addition(tmp_path: Path) -> None:
    old = load(tmp_path, BASE, "old.yaml")
    forced = compare(old, load(tmp_path, edit(_rename_device), "new.yaml"), force=True)
    assert (forced.devices_added, forced.devices_removed) == (("PUMP-7",), ("PUMP-07",))


def test_a_sparkplug_upstream_restarts_when_the_devices_it_announces_change(tmp_path: Path) -> None:
    # Its DBIRTHs list every device and channel: a new device must be born, so the node is restarted.
    base = edit(
        lambda d: d["upstreams"].append(
            {"name": "spb", "sparkplug": {"url": "mqtt://broker:1883", "group_id": "g"}}
        )
    )
    old = load(tmp_path, base, "old.yaml")
    added = copy.deepcopy(base)
    _add_device(added)
    changes = compare(old, load(tmp_path, added, "new.yaml"))
    assert changes.upstreams_changed == ("spb",)
    assert changes.upstreams_unchanged == ("central", "historian")


def test_the_summary_names_what_moved() -> None:
    changes = Changes(
        devices_added=("PLC-11",),
        devices_removed=("PLC-10",),
        devices_unchanged=("A", "B"),
        pending_restart=("metrics",),
    )
    assert changes.summary() == (
        "devices: +PLC-11 -PLC-10, 2 unchanged; upstreams: no change, 0 unchanged; pending a restart: metrics"
    )
