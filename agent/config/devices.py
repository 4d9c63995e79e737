"""Device entries of the configuration: connections, field maps, channels, ring buffers.

Reads YAML sections into the `agent.config.sources` dataclasses; never imports the pollers.
A device entry is exactly what ``devices.plant.Plant.config_yaml()`` emits: each field spec may
carry the keys of both protocols (Modbus ``register``/``type``, OPC UA ``node``) and each
connection uses the keys of its own protocol.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from agent.config.fields import _check_modbus_reads, _counter, _FieldReader
from agent.config.paths import read_path
from agent.config.sources import (
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
from agent.config.units import parse_size
from agent.config.yaml_lines import (
    _bool,
    _Ctx,
    _device_name,
    _empty,
    _int_in,
    _list,
    _one_of,
    _positive_duration,
    _Section,
    _text,
)

# --- devices ---------------------------------------------------------------------------------


def _namespace_uri(v: Any) -> str:
    if v == "" or (isinstance(v, str) and not v.strip()):
        raise ValueError(
            "is empty: give the namespace URI the server serves (e.g. urn:edge-agent:sim), or leave "
            "namespace out when the node ids carry their index (ns=2;s=...)"
        )
    return _text(v)


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
    events = _events(s.sub("events")) if s.has("events") else None
    initial, maximum = _backoff(s.sub("backoff"))
    dev = Device(
        name=name,
        connections=connections,
        channels=channels,
        poll=s.get("poll", _positive_duration, 0.25),
        boot_id=boot,
        ring=ring,
        events=events,
        namespace=s.get("namespace", _namespace_uri, None),
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


def _events(e: _Section) -> Events:
    out = Events(e.get("node", _text, "", required=True), e.get("type", _text, "", required=True))
    e.finish()
    return out


def _backoff(b: _Section) -> tuple[float, float]:
    """Reconnect delay: (initial, max) in seconds."""
    out = (b.get("initial", _positive_duration, 0.25), b.get("max", _positive_duration, 10.0))
    b.finish()
    return out


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


def _opcua(s: _Section) -> OpcUa:
    endpoint = s.get("endpoint", _text, "", required=True)
    if endpoint and not endpoint.startswith("opc.tcp://"):
        s.problem("endpoint", f"{endpoint!r} must start with opc.tcp://")
    elif "@" in urlsplit(endpoint).netloc:
        s.problem("endpoint", "must not carry a user or password; use username and password_file")
    security = _opcua_security(s)
    username = s.get("username", _text, None)
    password_file = read_path(s, "password_file", "file", secret=True)
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
    policy = "Basic256Sha256"
    if sec.has("policy"):
        raw = sec.raw("policy")
        policy = sec.get("policy", _policy, "Basic256Sha256") if raw is not None else "None"
    if policy == "None":
        if sec.has("mode") and sec.raw("mode") not in (None, "None"):
            sec.problem("mode", "must be left out with policy None (there is nothing to sign)")
        sec.finish(extra=("mode",))
        return OpcUaSecurity(policy="None", mode="None")
    out = OpcUaSecurity(
        policy=policy,
        mode=sec.get("mode", _one_of("Sign", "SignAndEncrypt"), "SignAndEncrypt"),
        certificate=read_path(sec, "certificate", "file"),
        private_key=read_path(sec, "private_key", "file", secret=True),
        server_certificate=read_path(sec, "server_certificate", "file"),
        trusted=read_path(sec, "trusted", "dir"),
        application_uri=sec.get("application_uri", _text, ""),
    )
    sec.finish()
    _security_problems(s, sec, out)
    return out


def _security_problems(s: _Section, sec: _Section, out: OpcUaSecurity) -> None:
    """A secured link needs our certificate and key, and the server's certificate trusted."""
    if not s.has("security"):
        if out.certificate is None:  # nothing said at all: one problem that says what to do
            s.problem(
                "security",
                "missing: OPC UA is secure by default (SignAndEncrypt, Basic256Sha256), which needs our "
                "certificate and private_key (`edge-agent certs` creates them) and the server's "
                "certificate in server_certificate or trusted; write security: {policy: None} to connect "
                "without security",
            )
        return
    if out.certificate is None or out.private_key is None:
        sec.ctx.problem(
            sec.line,
            f"{sec.path}.certificate",
            "our certificate and private_key are needed (`edge-agent certs` creates them)",
        )
    if out.server_certificate is None and out.trusted is None:
        sec.ctx.problem(
            sec.line,
            f"{sec.path}.trusted",
            "the server's certificate must be trusted explicitly: give server_certificate (pin one) "
            "or trusted (a directory of trusted certificates); there is no trust on first use",
        )


def _channels(s: _Section, fields: _FieldReader) -> tuple[Channel, ...]:
    out: list[Channel] = []
    if s.ok and not s.data:
        s.ctx.problem(s.line, s.path, "needs at least one channel")
    for name in list(s.data):
        c = s.sub(str(name))
        window = _window(c)
        tid = (
            None if window is not None else _counter(c, "transition_id", fields.read(c.sub("transition_id")))
        )
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
        if not c.has("state"):
            c.ctx.problem(c.line, c.key_path("state"), "missing")
        c.finish()
        out.append(
            Channel(str(name), tid, state, ts, from_state, latched, window, c.path, c.key_line("window"))
        )
    return tuple(out)


WINDOW_DOCS = "docs/window-keys.md"


def _window(c: _Section) -> float | None:
    """The channel's window (seconds) when it opted in with ``identity: window``, else None.

    A channel without a counter is refused unless it opts in (contract section 8): a window key
    merges two real changes inside one window, so it is never a silent default.
    """
    identity = c.get("identity", _one_of("counter", "window"), "counter")
    window = c.get("window", _positive_duration, None)
    if identity != "window":
        if c.has("window"):
            c.problem("window", "needs identity: window (a channel with a counter keys on its counter)")
        if not c.has("transition_id"):
            c.ctx.problem(
                c.line,
                c.key_path("transition_id"),
                "missing: an event channel needs the controller's transition counter; a channel "
                "without one may opt in to window keys with identity: window and a window "
                f"duration (see {WINDOW_DOCS})",
            )
        return None
    if c.has("transition_id"):
        c.problem(
            "transition_id", "a window channel has no counter: leave out transition_id or identity: window"
        )
        c.used.add("transition_id")
    if window is None and not c.has("window"):
        c.problem(
            "window", f"missing: identity: window needs a window duration, e.g. 60s (see {WINDOW_DOCS})"
        )
    elif window is not None and window < 0.001:
        c.problem("window", "must be at least 1ms (the unit of the window index)")
    return window if window is not None else 60.0


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
