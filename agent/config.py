"""The gateway configuration: YAML to typed, frozen dataclasses, checked before anything starts.

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
connection uses the keys of its own protocol. Durations take units (``250ms``, ``5s``, ``2m``).
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from agent.contract import ContractError, check_site
from agent.errors import ConfigError
from agent.settings import parse_size
from agent.sinks.settings import Backoff, HttpUpstream, MqttUpstream, Upstream
from agent.sources.modbus_decode import WORDS
from agent.sources.settings import (
    DEPRECATED_POLICIES,
    MAX_MESSAGE_SIZE,
    SECURE_POLICIES,
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
    WordOrder,
)

# --- the typed configuration ---------------------------------------------------------------

TABLES = ("holding", "input", "coil", "discrete")
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
    retention: Any = None


@dataclass(frozen=True)
class Metrics:
    listen: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class Config:
    site: str
    gateway: str
    store: StoreConfig
    devices: tuple[Device, ...]
    upstreams: tuple[Upstream, ...] = ()
    metrics: Metrics | None = None
    file: str = ""


# --- errors --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    key: str
    message: str

    def __str__(self) -> str:
        return (
            f"{self.file}:{self.line}: {self.key}: {self.message}"
            if self.key
            else (f"{self.file}:{self.line}: {self.message}")
        )


class ConfigProblems(ConfigError):
    """Every problem of a configuration at once (exit code 78)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        n = len(problems)
        head = f"{n} problem{'s' if n != 1 else ''} in the configuration"
        super().__init__(head + ":\n" + "\n".join(f"  {p}" for p in problems))


# --- YAML with line numbers ------------------------------------------------------------------


class _Map(dict[Any, Any]):
    line: int = 0
    key_lines: dict[Any, int]


class _Seq(list[Any]):
    line: int = 0


class _Loader(yaml.SafeLoader):
    duplicates: list[tuple[int, Any]]


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    out = _Map()
    out.line, out.key_lines = node.start_mark.line + 1, {}
    for knode, vnode in node.value:
        key = loader.construct_object(knode, deep=True)
        if key in out:
            loader.duplicates.append((knode.start_mark.line + 1, key))
        out[key] = loader.construct_object(vnode, deep=True)
        out.key_lines[key] = knode.start_mark.line + 1
    return out


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> _Seq:
    out = _Seq(loader.construct_object(n, deep=True) for n in node.value)
    out.line = node.start_mark.line + 1
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_seq)


def _read_yaml(path: Path, shown: str, problems: list[Problem]) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        problems.append(Problem(shown, 0, "", f"cannot read the file: {exc.strerror or exc}"))
        return None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        problems.append(Problem(shown, line, "", f"not UTF-8 text (byte {exc.start})"))
        return None
    loader: _Loader | None = None
    try:
        loader = _Loader(text)  # the reader checks for unprintable characters here already
        loader.duplicates = []
        doc = loader.get_single_data()
    except yaml.YAMLError as exc:
        problems.append(Problem(shown, _yaml_line(exc, text), "", f"not valid YAML: {_yaml_problem(exc)}"))
        return None
    except RecursionError:
        problems.append(Problem(shown, 0, "", "not valid YAML: nested too deeply"))
        return None
    finally:
        if loader is not None:
            loader.dispose()
    for line, key in loader.duplicates:
        problems.append(Problem(shown, line, str(key), "duplicate key (the later one would silently win)"))
    return doc


def _yaml_line(exc: yaml.YAMLError, text: str) -> int:
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return int(mark.line) + 1
    position = getattr(exc, "position", None)  # a ReaderError (unprintable character) has only this
    return text[: int(position)].count("\n") + 1 if isinstance(position, int) else 0


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        return f"character #x{exc.character:04x} is not allowed in YAML"
    return str(getattr(exc, "problem", None) or exc)


# --- a checked view of one mapping -----------------------------------------------------------

T = TypeVar("T")
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_NAME = re.compile(r"[A-Za-z0-9._-]+")


def parse_duration(value: Any) -> float:
    """``250ms``, ``5s``, ``2m``, ``1h`` -> seconds. A bare number is refused: units are required."""
    m = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise ValueError(f"{value!r} is not a duration; write it with a unit, e.g. 250ms, 5s, 2m")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]


class _Section:
    """One mapping of the YAML with its path and lines; readers record problems and return defaults."""

    def __init__(self, ctx: _Ctx, data: Any, path: str, line: int) -> None:
        self.ctx, self.path = ctx, path
        self.line = getattr(data, "line", line)
        self.ok = isinstance(data, dict)
        if not self.ok and data is not None:
            ctx.problem(self.line, path, f"must be a mapping, not {_kind(data)}")
        self.data: dict[Any, Any] = data if isinstance(data, dict) else {}
        self.used: set[str] = set()

    def key_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def key_line(self, key: str) -> int:
        lines: dict[Any, int] = getattr(self.data, "key_lines", {})
        return lines.get(key, self.line)

    def problem(self, key: str, message: str) -> None:
        self.ctx.problem(self.key_line(key), self.key_path(key), message)

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str) -> Any:
        self.used.add(key)
        return self.data.get(key)

    def get(self, key: str, check: Callable[[Any], T], default: T, *, required: bool = False) -> T:
        self.used.add(key)
        if key not in self.data or self.data[key] is None:
            if required:
                self.ctx.problem(self.line, self.key_path(key), "missing")
            return default
        try:
            return check(self.data[key])
        except (ValueError, TypeError, ContractError, ConfigError) as exc:
            self.problem(key, str(exc))
            return default

    def sub(self, key: str) -> _Section:
        self.used.add(key)
        return _Section(self.ctx, self.data.get(key), self.key_path(key), self.key_line(key))

    def finish(self, extra: tuple[str, ...] = ()) -> None:
        """Unknown keys are errors: a misspelt key must not silently fall back to a default."""
        for key in self.data:
            if key not in self.used and key not in extra:
                self.problem(str(key), "unknown key")


class _Ctx:
    def __init__(self, file: str, problems: list[Problem], check_files: bool = True) -> None:
        self.file, self.problems, self.check_files = file, problems, check_files

    def problem(self, line: int, key: str, message: str) -> None:
        self.problems.append(Problem(self.file, line, key, message))


def _kind(v: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "text", bool: "true/false", type(None): "empty"}.get(
        type(v), "a number" if isinstance(v, int | float) else type(v).__name__
    )


def _text(v: Any) -> str:
    if isinstance(v, bool):
        raise ValueError("must be text, not true/false (YAML reads On, Off, Yes and No as those: quote them)")
    if not isinstance(v, str | int) or v == "":
        raise ValueError(f"must be text, not {_kind(v)}")
    return str(v)


def _int_in(lo: int, hi: int) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"must be a whole number, not {_kind(v)}")
        if v < lo:
            raise ValueError(f"must be >= {lo}")
        if v > hi:
            raise ValueError(f"must be <= {hi}")
        return v

    return check


def _one_of(*choices: str) -> Callable[[Any], str]:
    def check(v: Any) -> str:
        if v not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, not {v!r}")
        return str(v)

    return check


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"must be true or false, not {v!r}")
    return v


def _positive_duration(v: Any) -> float:
    seconds = parse_duration(v)
    if seconds <= 0:
        raise ValueError("must be longer than 0")
    return seconds


def _device_name(v: Any) -> str:
    text = _text(v)
    if not _NAME.fullmatch(text):
        raise ValueError(f"{text!r} must match [A-Za-z0-9._-]+ (it is the part of a source before '/')")
    return text


def _values(v: Any) -> dict[int, str]:
    if not isinstance(v, dict):
        raise ValueError("must map numbers to names, e.g. {0: Normal, 1: Trip}")
    out: dict[int, str] = {}
    for k, name in v.items():
        if isinstance(k, bool) or not isinstance(k, int):
            raise ValueError(f"key {k!r} must be a number (the raw value)")
        out[k] = _text(name)
    return out


# --- the loader ------------------------------------------------------------------------------


def load(path: str | Path, *, check_files: bool = True) -> Config:
    """Read, check and compile the configuration at ``path`` (plus its ``devices.d``).

    ``check_files=False`` skips the existence check of certificate and password files (to
    validate a config written for another machine, e.g. ``config.example.yaml``).
    """
    main = Path(path)
    problems: list[Problem] = []
    doc = _read_yaml(main, str(main), problems)
    if problems:
        raise ConfigProblems(problems)
    ctx = _Ctx(str(main), problems, check_files)
    top = _Section(ctx, doc if doc is not None else _Map(), "", 1)
    site = top.get("site", lambda v: check_site(_text(v)), "", required=True)
    gateway = top.get("gateway", _text, "", required=True)
    store = _store(top.sub("store"))
    upstreams = _upstreams(top)
    metrics = _metrics(top.sub("metrics")) if top.has("metrics") else None
    devices: list[Device] = []
    for i, entry in enumerate(top.get("devices", _list, _empty())):
        devices.append(_device(_Section(ctx, entry, f"devices[{i}]", top.key_line("devices")), ctx))
    devices += _devices_dir(top, main, problems, check_files)
    top.finish()
    seen: dict[str, Device] = {}
    for d in devices:
        if d.name in seen:
            first = seen[d.name]
            problems.append(
                Problem(
                    d.file,
                    d.line,
                    "name",
                    f"device {d.name!r} is defined twice (also {first.file}:{first.line})",
                )
            )
        seen[d.name] = d
    if not devices and not problems:
        problems.append(Problem(str(main), top.line, "devices", "no devices configured"))
    if problems:
        raise ConfigProblems(problems)
    return Config(site, gateway, store, tuple(devices), upstreams, metrics, str(main))


def _empty() -> list[Any]:
    return []


def _list(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise ValueError(f"must be a list, not {_kind(v)}")
    return v


def _devices_dir(top: _Section, main: Path, problems: list[Problem], check_files: bool) -> list[Device]:
    given = top.get("devices_dir", _text, "")
    folder = (main.parent / given) if given else main.parent / "devices.d"
    if not folder.is_dir():
        if given:
            top.problem("devices_dir", f"{folder} is not a directory")
        return []
    out: list[Device] = []
    for file in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        shown = str(file)
        doc = _read_yaml(file, shown, problems)
        if doc is None:
            continue
        ctx = _Ctx(shown, problems, check_files)
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
    retention = _retention(s) if s.has("retention") else None
    s.finish()
    return StoreConfig(path, sync, max_size, retention)


def _retention(s: _Section) -> Any:
    """Handed to ``agent.store.retention`` when that module exists (it owns the format)."""
    raw = s.raw("retention")
    try:
        module = importlib.import_module("agent.store.retention")
    except ImportError:
        return dict(raw) if isinstance(raw, dict) else raw
    parse = getattr(module, "parse_retention", None)
    if parse is None:
        return dict(raw) if isinstance(raw, dict) else raw
    try:
        return parse(dict(raw) if isinstance(raw, dict) else raw)
    except (ValueError, TypeError, ConfigError) as exc:
        s.problem("retention", str(exc))
        return None


def _metrics(s: _Section) -> Metrics:
    out = Metrics(listen=s.get("listen", _text, None), path=s.get("path", _text, None))
    s.finish()
    return out


def _upstreams(top: _Section) -> tuple[Upstream, ...]:
    out: list[Upstream] = []
    names: set[str] = set()
    for i, entry in enumerate(top.get("upstreams", _list, _empty())):
        s = _Section(top.ctx, entry, f"upstreams[{i}]", top.key_line("upstreams"))
        name = s.get("name", _text, "", required=True)
        if name in names:
            s.problem("name", f"upstream {name!r} is configured twice")
        names.add(name)
        backfill = s.get("backfill", _one_of("none", "all"), "none")
        kinds = [k for k in ("mqtt", "http") if s.has(k)]
        if len(kinds) != 1:
            s.ctx.problem(s.line, s.path, "needs exactly one of mqtt: or http:")
        for kind in kinds[:1]:
            cls: type[MqttUpstream] | type[HttpUpstream] = MqttUpstream if kind == "mqtt" else HttpUpstream
            up = _dataclass_from(s.sub(kind), cls, {"name": name, "backfill": backfill})
            if up is not None:
                out.append(up)
        s.finish(extra=("mqtt", "http"))
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
        elif k in names:
            value = s.raw(k)
            kind = str(names[k].type)
            if "int" in kind and (isinstance(value, bool) or not isinstance(value, int)):
                s.problem(k, f"must be a whole number, not {_kind(value)}")
            elif "str" in kind and not isinstance(value, str | int):
                s.problem(k, f"must be text, not {_kind(value)}")
            else:
                kwargs[k] = (
                    str(value)
                    if "str" in kind and not isinstance(value, str) and "int" not in kind
                    else value
                )
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


# --- devices ---------------------------------------------------------------------------------


def _device(s: _Section, ctx: _Ctx) -> Device:
    name = s.get("name", _device_name, "?", required=True)
    connections = _connections(s)
    modbus = any(isinstance(c, ModbusTcp | ModbusRtu) for c in connections)
    opcua = any(isinstance(c, OpcUa) for c in connections)
    order = s.get("word_order", _one_of("big", "little"), "big")
    word_order: WordOrder = "little" if order == "little" else "big"
    fields = _FieldReader(modbus, opcua)
    boot = _counter(s, "boot_id", fields.read(s.sub("boot_id"))) if s.has("boot_id") else None
    if not s.has("channels"):
        s.ctx.problem(s.line, s.key_path("channels"), "missing")
    channels = _channels(s.sub("channels"), fields)
    ring = _ring(s.sub("ring"), fields, modbus) if s.has("ring") else None
    events = None
    if s.has("events"):
        e = s.sub("events")
        events = Events(e.get("node", _text, "", required=True), e.get("type", _text, "", required=True))
        e.finish()
    backoff = s.sub("backoff")
    initial = backoff.get("initial", _positive_duration, 0.25)
    maximum = backoff.get("max", _positive_duration, 10.0)
    backoff.finish()
    dev = Device(
        name=name,
        connections=connections,
        channels=channels,
        poll=s.get("poll", _positive_duration, 0.25),
        boot_id=boot,
        ring=ring,
        events=events,
        namespace=s.get("namespace", _text, None),
        word_order=word_order,
        backoff_initial=initial,
        backoff_max=maximum,
        file=ctx.file,
        line=s.line,
    )
    s.finish()
    if modbus:
        _check_modbus_reads(s, dev)
    return dev


def _connections(s: _Section) -> tuple[Connection, ...]:
    out: list[Connection] = []
    raw = s.get("connections", _list, _empty(), required=True)
    if not raw and s.has("connections"):
        s.problem("connections", "needs at least one connection")
    for i, entry in enumerate(raw):
        c = _Section(s.ctx, entry, f"{s.key_path('connections')}[{i}]", s.key_line("connections"))
        kinds = [k for k in ("modbus", "modbus_rtu", "opcua") if c.has(k)]
        if len(kinds) != 1:
            c.ctx.problem(c.line, c.path, "needs exactly one of modbus:, modbus_rtu: or opcua:")
        for kind in kinds[:1]:
            sub = c.sub(kind)
            conn = (
                _modbus_tcp(sub)
                if kind == "modbus"
                else _modbus_rtu(sub)
                if kind == "modbus_rtu"
                else (_opcua(sub))
            )
            sub.finish()
            out.append(conn)
        c.finish()
    return tuple(out)


def _modbus_tcp(s: _Section) -> ModbusTcp:
    return ModbusTcp(
        host=s.get("host", _text, "", required=True),
        port=s.get("port", _int_in(1, 65535), 502),
        unit=s.get("unit", _int_in(0, 247), 1),
        timeout=s.get("timeout", _positive_duration, 1.0),
    )


def _modbus_rtu(s: _Section) -> ModbusRtu:
    return ModbusRtu(
        serial=s.get("serial", _text, "", required=True),
        baudrate=s.get("baudrate", _int_in(300, 4_000_000), 19200),
        parity=s.get("parity", _one_of("N", "E", "O"), "N"),
        stopbits=s.get("stopbits", _int_in(1, 2), 1),
        bytesize=s.get("bytesize", _int_in(5, 8), 8),
        unit=s.get("unit", _int_in(1, 247), 1),
        timeout=s.get("timeout", _positive_duration, 1.0),
    )


def _existing_file(v: Any) -> str:
    text = _text(v)
    if not Path(text).is_file():
        raise ValueError(f"file {text} does not exist")
    return text


def _existing_dir(v: Any) -> str:
    text = _text(v)
    if not Path(text).is_dir():
        raise ValueError(f"directory {text} does not exist")
    return text


def _opcua(s: _Section) -> OpcUa:
    endpoint = s.get("endpoint", _text, "", required=True)
    if endpoint and not endpoint.startswith("opc.tcp://"):
        s.problem("endpoint", f"{endpoint!r} must start with opc.tcp://")
    security = _opcua_security(s)
    file_ = _existing_file if s.ctx.check_files else _text
    username = s.get("username", _text, None)
    password_file = s.get("password_file", file_, None)
    if password_file and not username:
        s.problem("password_file", "needs a username")
    if password_file and security.insecure:
        s.problem(
            "password_file", "a password over security policy None would travel in clear; secure the link"
        )
    return OpcUa(
        endpoint=endpoint,
        security=security,
        username=username,
        password_file=password_file,
        subscribe=s.get("subscribe", _bool, False),
        publishing=s.get("publishing", _positive_duration, 0.1),
        reconcile=s.get("reconcile", _positive_duration, 5.0),
        timeout=s.get("timeout", _positive_duration, 2.0),
        max_message_size=s.get("max_message_size", _message_size, MAX_MESSAGE_SIZE),
    )


def _message_size(v: Any) -> int:
    size = parse_size(v)
    if not 64 * 1024 <= size <= 256 * 1024 * 1024:
        raise ValueError(f"{v!r} must be between 64KiB and 256MiB")
    return size


def _policy(v: Any) -> str:
    text = "None" if v is None else str(v)
    if text in DEPRECATED_POLICIES:
        raise ValueError(
            f"{text} is deprecated by the OPC Foundation (SHA-1, weak keys) and refused; "
            f"use {', '.join(SECURE_POLICIES)}"
        )
    if text not in (*SECURE_POLICIES, "None"):
        raise ValueError(
            f"must be one of {', '.join(SECURE_POLICIES)} or None (explicitly insecure), not {v!r}"
        )
    return text


def _opcua_security(s: _Section) -> OpcUaSecurity:
    """Secure by default: no ``security:`` means SignAndEncrypt/Basic256Sha256, which needs our
    certificate and a trusted server certificate. ``policy: None`` must be written out."""
    sec = s.sub("security")
    where = sec.path
    policy = "Basic256Sha256"
    if sec.has("policy"):
        raw = sec.raw("policy")
        policy = sec.get("policy", _policy, "Basic256Sha256") if raw is not None else "None"
    if policy == "None":
        if sec.has("mode") and sec.raw("mode") not in (None, "None"):
            sec.problem("mode", "must be left out with policy None (there is nothing to sign)")
        sec.finish(extra=("mode",))
        return OpcUaSecurity(policy="None", mode="None")
    file_ = _existing_file if s.ctx.check_files else _text
    dir_ = _existing_dir if s.ctx.check_files else _text
    out = OpcUaSecurity(
        policy=policy,
        mode=sec.get("mode", _one_of("Sign", "SignAndEncrypt"), "SignAndEncrypt"),
        certificate=sec.get("certificate", file_, None),
        private_key=sec.get("private_key", file_, None),
        server_certificate=sec.get("server_certificate", file_, None),
        trusted=sec.get("trusted", dir_, None),
        application_uri=sec.get("application_uri", _text, ""),
    )
    sec.finish()
    if not s.has("security"):
        if out.certificate is None:  # nothing said at all: one problem that says what to do
            s.problem(
                "security",
                "missing: OPC UA is secure by default (SignAndEncrypt, Basic256Sha256), which needs our "
                "certificate and private_key (`edge-agent certs` creates them) and the server's "
                "certificate in server_certificate or trusted; write security: {policy: None} to connect "
                "without security",
            )
        return out
    if out.certificate is None or out.private_key is None:
        sec.ctx.problem(
            sec.line,
            f"{where}.certificate",
            "our certificate and private_key are needed (`edge-agent certs` creates them)",
        )
    if out.server_certificate is None and out.trusted is None:
        sec.ctx.problem(
            sec.line,
            f"{where}.trusted",
            "the server's certificate must be trusted explicitly: give server_certificate (pin one) "
            "or trusted (a directory of trusted certificates); there is no trust on first use",
        )
    return out


class _FieldReader:
    """Reads field specs; which keys are required depends on the device's connection kinds."""

    def __init__(self, modbus: bool, opcua: bool) -> None:
        self.modbus, self.opcua = modbus, opcua

    def read(self, s: _Section, *, in_slot: bool = False, time: bool = False) -> Field:
        register = s.get("register", _int_in(0, 65535), None)
        offset = s.get("offset", _int_in(0, 124), None)
        node = s.get("node", _text, None)
        f = Field(
            register=register,
            type=s.get("type", _one_of(*WORDS), "uint64" if time else "uint16"),
            table=s.get("table", _one_of(*TABLES), "holding"),
            node=node,
            values=s.get("values", _values, {}),
            unit=s.get("unit", _one_of("ms", "s"), "ms"),
            clock=s.get("clock", _zone, "UTC"),
            offset=offset,
            value=s.get("value", _int_in(0, 2**32 - 1), None),
            word_order=s.get("word_order", _one_of("big", "little"), None),  # type: ignore[arg-type]
            line=s.line,
        )
        s.get("epoch", _one_of("unix"), "unix")
        where = "offset" if in_slot else "register"
        if s.ok and self.modbus and (offset if in_slot else register) is None and f.value is None:
            s.ctx.problem(s.line, s.key_path(where), "missing (the device has a Modbus connection)")
        if s.ok and self.opcua and node is None and f.value is None:
            s.ctx.problem(s.line, s.key_path("node"), "missing (the device has an OPC UA connection)")
        if register is not None and register + f.words > 65536:
            s.problem("register", f"a {f.type} at {register} runs past register 65535")
        s.finish()
        return f


UNSIGNED = ("uint16", "uint32", "uint64")


def _counter(s: _Section, key: str, f: Field) -> Field:
    """Identity registers hold unsigned whole numbers: a float or signed type would let NaN or a
    negative number become an id (docs/pollers.md, "Bad values")."""
    if (f.register is not None or f.offset is not None) and f.type not in UNSIGNED:
        s.problem(key, f"type {f.type} cannot hold an id or counter; use {', '.join(UNSIGNED)}")
    return f


def _zone(v: Any) -> str:
    text = _text(v)
    if text != "UTC":
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(text)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"{text!r} is not a time zone (e.g. UTC or Europe/Berlin)") from exc
    return text


def _channels(s: _Section, fields: _FieldReader) -> tuple[Channel, ...]:
    out: list[Channel] = []
    if s.ok and not s.data:
        s.ctx.problem(s.line, s.path, "needs at least one channel")
    for name in list(s.data):
        c = s.sub(str(name))
        tid = _counter(c, "transition_id", fields.read(c.sub("transition_id")))
        state = fields.read(c.sub("state"))
        ts_raw = c.raw("source_timestamp")
        ts, from_state = None, False
        if ts_raw == "source":
            from_state = True
            if fields.modbus:
                c.problem(
                    "source_timestamp",
                    "'source' (the OPC UA DataValue time) has no Modbus equivalent; map a register",
                )
        elif ts_raw is not None:
            ts = fields.read(c.sub("source_timestamp"), time=True)
        latched: dict[str, Field] = {}
        if c.has("latched"):
            lat = c.sub("latched")
            for lname in list(lat.data):
                if lname == "state":
                    lat.problem("state", "'state' is the channel's state; name the latched field otherwise")
                latched[str(lname)] = fields.read(lat.sub(str(lname)))
            lat.finish()
        for key in ("transition_id", "state"):
            if not c.has(key):
                c.ctx.problem(c.line, c.key_path(key), "missing")
        c.finish()
        out.append(Channel(str(name), tid, state, ts, from_state, latched))
    return tuple(out)


def _ring(s: _Section, fields: _FieldReader, modbus: bool) -> Ring:
    head = _counter(s, "head", fields.read(s.sub("head")))
    capacity = fields.read(s.sub("capacity"))
    slots = s.sub("slots")
    register = slots.get("register", _int_in(0, 65535), None)
    size = slots.get("size", _int_in(1, 125), None)
    count = slots.get("count", _int_in(1, 100_000), capacity.value or 0)
    if count == 0:
        slots.problem("count", "missing (or give ring.capacity.value)")
    f = slots.sub("fields")
    ring_fields = {str(k): fields.read(f.sub(str(k)), in_slot=True) for k in list(f.data)}
    for key in ("seq", "channel", "transition_id", "boot_id"):
        if key in ring_fields:
            _counter(f, key, ring_fields[key])
    for key in ("seq", "channel", "transition_id", "state"):
        if key not in ring_fields:
            f.ctx.problem(f.line, f.key_path(key), "missing")
    f.finish()
    if modbus and (register is None or size is None):
        slots.ctx.problem(slots.line, slots.path, "register and size are needed for a Modbus connection")
    slots.finish()
    read = None
    if s.has("read"):
        r = s.sub("read")
        read = (
            r.get("register", _int_in(0, 65535), 0, required=True),
            r.get("count", _int_in(1, 125), 1, required=True),
        )
        r.finish()
    s.finish()
    return Ring(head, capacity, ring_fields, count, register, size, read)


def _check_modbus_reads(s: _Section, dev: Device) -> None:
    """A slot field must fit its slot, and the ring read must cover header and slots."""
    ring = dev.ring
    if ring is None or ring.slot_size is None or ring.slots_register is None:
        return
    for name, f in ring.fields.items():
        if f.offset is not None and f.offset + f.words > ring.slot_size:
            s.ctx.problem(
                f.line,
                f"{s.path}.ring.slots.fields.{name}.offset",
                f"a {f.type} at offset {f.offset} does not fit a slot of {ring.slot_size} registers",
            )
    if ring.read is not None:
        start, count = ring.read
        end = ring.slots_register + ring.slot_size * ring.slot_count
        if ring.head.register is not None and not (start <= ring.head.register and end <= start + count):
            s.ctx.problem(
                s.line,
                f"{s.path}.ring.read",
                f"registers {start}..{start + count - 1} do not cover the head and all slots "
                f"(up to {end - 1})",
            )
