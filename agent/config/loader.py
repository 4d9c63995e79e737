"""The gateway configuration: YAML to typed, frozen dataclasses, checked before anything starts.

Imports only `agent.config` and `agent.core`; it opens no store and no connection.
Every problem is collected (not just the first) and reported as ``file:line: key: message``,
e.g. ``devices.d/pump-07.yaml:12: devices[0].channels.Trip.state.register: must be <= 65535``.
:func:`load` raises :class:`ConfigProblems` (a ``ConfigError``, exit code 78) with all of them.

Shape (``config.example.yaml`` has every key with a comment)::

    site: plant-1                 # CloudEvents source prefix; never the gateway
    gateway: gw-line3             # evidence only
    store: {path: /var/lib/edge-agent/events.db, synchronous: FULL, max_size: 2GB, retention: {...}}
    upstreams: [{name: central, mqtt: {...}}, {name: historian, http: {...}}]
    devices_dir: devices.d        # optional; default: devices.d next to this file, when it exists
    devices: [...]                # one entry per controller (format: docs/pollers.md)
    metrics: {listen: "127.0.0.1:9108"}

A device entry is exactly what ``devices.plant.Plant.config_yaml()`` emits: each field spec may
carry the keys of both protocols (Modbus ``register``/``type``, OPC UA ``node``) and each
connection uses the keys of its own protocol. Durations take units (``250ms``, ``5s``, ``2m``,
``30d``) and sizes may (``512MB``, ``2GiB``): one parser each, in `agent.config.units`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agent.config.advice import metrics_warnings
from agent.config.devices import _device
from agent.config.identity import horizon_problems, window_warnings
from agent.config.path_env import FileUse, PathEnv
from agent.config.paths import read_path
from agent.config.retention import RetentionSettings, read_retention
from agent.config.sources import (
    Channel,
    Connection,
    Device,
    Events,
    Field,
    ModbusRtu,
    ModbusTcp,
    OpcUa,
    OpcUaSecurity,
    Ring,
)
from agent.config.sparkplug import AnyUpstream, SparkplugUpstream, sparkplug_node_problems
from agent.config.store_size import DEFAULT_RESERVE, quota_problem
from agent.config.store_wear import DEFAULT_COMMIT_INTERVAL, commit_interval_problem, parse_write_budget
from agent.config.units import parse_duration, parse_size
from agent.config.upstreams import Backoff, HttpUpstream, MqttUpstream
from agent.config.yaml_lines import (
    ConfigProblems,
    Problem,
    _Ctx,
    _empty,
    _kind,
    _list,
    _Map,
    _one_of,
    _positive_duration,
    _read_yaml,
    _Section,
    _text,
)
from agent.core.cloudevent_ids import check_site

T = TypeVar("T")
PATH_KEYS = frozenset({"ca_file", "cert_file", "key_file", "password_file", "token_file"})
SECRET_KEYS = frozenset({"key_file", "password_file", "token_file"})

# --- the typed configuration ---------------------------------------------------------------

__all__ = [
    "Channel",
    "Config",
    "ConfigProblems",
    "Connection",
    "Device",
    "Events",
    "Field",
    "ModbusRtu",
    "ModbusTcp",
    "OpcUa",
    "OpcUaSecurity",
    "Problem",
    "RetentionSettings",
    "Ring",
    "StoreConfig",
    "load",
    "parse_duration",
]


@dataclass(frozen=True)
class StoreConfig:
    path: str
    synchronous: str = "FULL"
    max_size: int | None = None
    retention: RetentionSettings | None = None  # None: no `retention:` section, nothing is pruned
    reserve: int = DEFAULT_RESERVE  # bytes kept free for shutdown, alarms and delivered-marks
    commit_interval: float = DEFAULT_COMMIT_INTERVAL  # seconds: the recorder commits at most this often
    write_budget: float | None = None  # bytes per second the process may write to storage (status, alert)


@dataclass(frozen=True)
class Metrics:
    listen: str | None = None
    path: str | None = None
    reason: str | None = None  # why it listens beyond loopback (silences the warning)


@dataclass(frozen=True)
class Config:
    site: str
    gateway: str
    store: StoreConfig
    devices: tuple[Device, ...]
    upstreams: tuple[AnyUpstream, ...] = ()
    metrics: Metrics | None = None
    file: str = ""
    warnings: tuple[str, ...] = ()  # `check` and `run` say them; nothing fails
    files: tuple[FileUse, ...] = ()  # every file and directory the settings name (agent.config.paths)
    status_every: float = 60.0  # seconds between status records on the upstreams (operator.md 3)


# --- the loader ------------------------------------------------------------------------------


def load(path: str | Path, *, check_files: bool = True, paths: PathEnv | None = None) -> Config:
    """Read, check and compile the configuration at ``path`` (plus its ``devices.d``).

    ``check_files=False`` skips the existence check of certificate and password files (to
    validate a config written for another machine, e.g. ``config.example.yaml``). ``paths``
    says what ``${VAR}`` references in file paths expand to (default: this process's
    environment; `check` adds the unit's credentials).
    """
    main = Path(path)
    problems: list[Problem] = []
    doc = _read_yaml(main, str(main), problems)
    if problems:
        raise ConfigProblems(problems)
    ctx = _Ctx(str(main), problems, check_files, paths)
    ctx.files.append(FileUse(str(main), 1, "(the configuration)", str(main), "file", False))
    top = _Section(ctx, doc if doc is not None else _Map(), "", 1)
    site = top.get("site", lambda v: check_site(_text(v)), "", required=True)
    gateway = top.get("gateway", _text, "", required=True)
    store = _store(top.sub("store"))
    upstreams = _upstreams(top, gateway)
    metrics = _metrics(top.sub("metrics")) if top.has("metrics") else None
    status_every = top.get("status_every", _positive_duration, 60.0)
    devices = [
        _device(_Section(ctx, entry, f"devices[{i}]", top.key_line("devices")), ctx)
        for i, entry in enumerate(top.get("devices", _list, _empty()))
    ]
    devices += _devices_dir(top, main, ctx)
    top.finish()
    _check_names(devices, problems)
    problems += horizon_problems(devices, store.retention)
    if not devices and not problems:
        problems.append(Problem(str(main), top.line, "devices", "no devices configured"))
    if problems:
        raise ConfigProblems(problems)
    warnings = window_warnings(devices) + tuple(metrics_warnings(metrics, str(main)))
    return Config(
        site,
        gateway,
        store,
        tuple(devices),
        upstreams,
        metrics,
        str(main),
        warnings,
        tuple(ctx.files),
        status_every,
    )


def _check_names(devices: list[Device], problems: list[Problem]) -> None:
    """A device name is the part of every source before '/': it must be unique."""
    seen: dict[str, Device] = {}
    for d in devices:
        if d.name in seen:
            first = seen[d.name]
            message = f"device {d.name!r} is defined twice (also {first.file}:{first.line})"
            problems.append(Problem(d.file, d.line, "name", message))
        seen[d.name] = d


def _devices_dir(top: _Section, main: Path, main_ctx: _Ctx) -> list[Device]:
    given = top.get("devices_dir", _text, "")
    folder = (main.parent / given) if given else main.parent / "devices.d"
    if not folder.is_dir():
        if given:
            top.problem("devices_dir", f"{folder} is not a directory")
        return []
    out: list[Device] = []
    main_ctx.files.append(
        FileUse(main_ctx.file, top.key_line("devices_dir"), "devices_dir", str(folder), "dir", False)
    )
    for file in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        shown = str(file)
        main_ctx.files.append(FileUse(shown, 1, "(a device file)", shown, "file", False))
        doc = _read_yaml(file, shown, main_ctx.problems)
        if doc is None:
            continue
        ctx = _Ctx(shown, main_ctx.problems, main_ctx.check_files, main_ctx.paths, main_ctx.files)
        # A file holds one device, or a `devices:` list (the simulator's snippet pasted as is).
        entries = doc.get("devices") if isinstance(doc, dict) and "devices" in doc else [doc]
        if not isinstance(entries, list):
            ctx.problem(getattr(doc, "line", 1), "devices", "must be a list")
            continue
        for i, entry in enumerate(entries):
            label = f"devices[{i}]" if isinstance(doc, dict) and "devices" in doc else ""
            out.append(_device(_Section(ctx, entry, label, getattr(entry, "line", 1)), ctx))
    return out


def _store(s: _Section) -> StoreConfig:
    path = s.get("path", _text, "", required=True)
    sync = s.get("synchronous", lambda v: _one_of("FULL", "EXTRA", "NORMAL")(str(v).upper()), "FULL")
    max_size = s.get("max_size", parse_size, None)
    reserve = s.get("reserve", parse_size, DEFAULT_RESERVE)
    if (why := quota_problem(max_size, reserve)) is not None:
        s.problem("max_size", why)
    interval = s.get("commit_interval", parse_duration, DEFAULT_COMMIT_INTERVAL)
    if (why := commit_interval_problem(interval)) is not None:
        s.problem("commit_interval", why)
    budget = s.get("write_budget", parse_write_budget, None)
    retention = read_retention(s.sub("retention")) if s.has("retention") else None
    s.finish()
    return StoreConfig(path, sync, max_size, retention, reserve, interval, budget)


def _metrics(s: _Section) -> Metrics:
    out = Metrics(
        listen=s.get("listen", _text, None),
        path=s.get("path", _text, None),
        reason=s.get("reason", _text, None),
    )
    s.finish()
    return out


def _upstreams(top: _Section, gateway: str) -> tuple[AnyUpstream, ...]:
    out: list[AnyUpstream] = []
    names: set[str] = set()
    for i, entry in enumerate(top.get("upstreams", _list, _empty())):
        s = _Section(top.ctx, entry, f"upstreams[{i}]", top.key_line("upstreams"))
        name = s.get("name", _text, "", required=True)
        if name in names:
            s.problem("name", f"upstream {name!r} is configured twice")
        names.add(name)
        backfill = s.get("backfill", _one_of("none", "all"), "none")
        kinds = [k for k in ("mqtt", "http", "sparkplug") if s.has(k)]
        if len(kinds) != 1:
            s.ctx.problem(s.line, s.path, "needs exactly one of mqtt:, http: or sparkplug:")
        for kind in kinds[:1]:
            cls: type[AnyUpstream] = {"mqtt": MqttUpstream, "http": HttpUpstream}.get(kind, SparkplugUpstream)
            up = _dataclass_from(s.sub(kind), cls, {"name": name, "backfill": backfill})
            if up is not None:
                out.append(up)
                if isinstance(up, SparkplugUpstream):
                    for problem in sparkplug_node_problems(up, out[:-1], gateway):
                        s.sub(kind).problem("edge_node_id", problem)
        s.finish(extra=("mqtt", "http", "sparkplug"))
    return tuple(out)


def _dataclass_from(s: _Section, cls: type[T], fixed: dict[str, Any]) -> T | None:
    """Build an upstream settings class from YAML keys: field names as is, `<x>: 5s` for `<x>_s`."""
    kwargs: dict[str, Any] = dict(fixed)
    names = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in list(s.data):
        k = str(key)
        if k in fixed:
            s.problem(k, "belongs one level up, next to the upstream's name")
            s.used.add(k)
        elif k == "backoff":
            b = s.sub("backoff")
            kwargs["backoff"] = Backoff(
                b.get("initial", _positive_duration, 0.5), b.get("max", _positive_duration, 60.0)
            )
            b.finish()
        elif f"{k}_s" in names:
            kwargs[f"{k}_s"] = s.get(k, _positive_duration, names[f"{k}_s"].default)
        elif k in PATH_KEYS and k in names:
            kwargs[k] = read_path(s, k, "file", secret=k in SECRET_KEYS)
        elif k in names:
            _plain_value(s, k, str(names[k].type), kwargs)
    s.finish()
    try:
        obj = cls(**kwargs)
    except TypeError as exc:
        s.ctx.problem(s.line, s.path, str(exc))
        return None
    for text in obj.problems():  # type: ignore[attr-defined]
        key, _, message = str(text).partition(": ")
        first = key.split("/")[0]
        s.ctx.problem(s.key_line(first), s.key_path(key), message or str(text))
    return obj


def _plain_value(s: _Section, key: str, kind: str, kwargs: dict[str, Any]) -> None:
    """A whole number or a text setting, checked against the field's declared type."""
    value = s.raw(key)
    if kind == "bool":
        if isinstance(value, bool):
            kwargs[key] = value
        else:
            s.problem(key, f"must be true or false, not {_kind(value)}")
    elif "int" in kind and (isinstance(value, bool) or not isinstance(value, int)):
        s.problem(key, f"must be a whole number, not {_kind(value)}")
    elif "str" in kind and not isinstance(value, str | int):
        s.problem(key, f"must be text, not {_kind(value)}")
    else:
        kwargs[key] = (
            str(value) if "str" in kind and not isinstance(value, str) and "int" not in kind else value
        )
