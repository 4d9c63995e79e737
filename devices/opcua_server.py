"""An asyncua server exposing one or more controllers (see :mod:`devices.opcua_nodes` for the layout).

Start-up cost: ``Server.init()`` loads the standard address space and takes about 2 s on a
2-core machine, so :meth:`OpcUaSimServer.init` is separate from :meth:`start`, and tests share
one server per module. The clock task is disabled (``disable_clock``): otherwise ``stop()``
waits 1 s for it, and ServerStatus/CurrentTime is not needed by anyone here.

Consistency: :meth:`sync` writes through ``iserver.write_attribute_value``, which assigns the
value before it runs data-change callbacks; those only enqueue notifications (they would
publish inline only for a subscription with publishing interval 0), so in practice nothing
yields between the writes of one sync and one Read request sees all of them or none. Ring
slots are written before channels, the ring head last, as on the Modbus side.

A server restart (:meth:`restart_server`) is stop + start of the same object on the same
port: connections drop and ServerStatus/StartTime changes, which is the agent's restart
evidence for OPC UA. It does not restart the controllers (that is ``Controller.restart``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncua
from asyncua.crypto.permission_rules import User, UserRole
from asyncua.crypto.truststore import TrustStore
from asyncua.crypto.validator import CertificateValidator, CertificateValidatorOptions

from devices.alarm_model import AlarmBook, AlarmEvent, EventIdKind
from devices.controller import Controller, system_clock
from devices.opcua_alarms import OpcUaAlarms
from devices.opcua_nodes import NAMESPACE, NodeLayout
from devices.pki import SERVER_URI

logging.getLogger("asyncua").setLevel(logging.CRITICAL)

# asyncua ships type hints, but they are narrower than what it accepts at run time (NodeId
# takes a plain str and int, DataValue a datetime); the boundary is typed Any on purpose.
ua: Any = asyncua.ua
Server: Any = asyncua.Server  # type: ignore[attr-defined]

POLICIES = {
    "None": ua.SecurityPolicyType.NoSecurity,
    "Basic256Sha256_Sign": ua.SecurityPolicyType.Basic256Sha256_Sign,
    "Basic256Sha256_SignAndEncrypt": ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt,
}
U16, U32, U64 = ua.VariantType.UInt16, ua.VariantType.UInt32, ua.VariantType.UInt64
RING_TYPES = {"Seq": U32, "Channel": U16, "State": U16, "TransitionId": U32, "BootId": U32, "SourceTime": U64}
EVENT_FIELDS = [("Channel", ua.VariantType.String), ("TransitionId", U32), ("BootId", U32), ("State", U16)]
EVENT_FIELDS += [("StateName", ua.VariantType.String), ("SourceTime", U64)]


@dataclass(frozen=True)
class OpcUaSecurity:
    """Which endpoints to offer and who may use them.

    ``trusted_dir`` turns on client certificate validation against that trust store (without
    it asyncua accepts any client certificate); ``users`` turns off anonymous login.
    """

    policies: tuple[str, ...] = ("None",)
    certificate: Path | None = None
    private_key: Path | None = None
    trusted_dir: Path | None = None
    users: dict[str, str] = field(default_factory=dict)


class _Users:
    """asyncua's user_manager protocol: ``get_user`` returns a User, or None to refuse the login."""

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users

    def get_user(
        self, iserver: Any, username: str | None = None, password: str | None = None, certificate: Any = None
    ) -> Any:
        if username is not None and self.users.get(username) == password:
            return User(role=UserRole.User, name=username)
        return None


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class OpcUaSimServer:
    def __init__(
        self,
        controllers: list[Controller],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        path: str = "/sim/",
        security: OpcUaSecurity | None = None,
        alarm_event_ids: EventIdKind = "unique",
    ) -> None:
        self.controllers = list(controllers)
        clock = self.controllers[0].now_ms if self.controllers else system_clock
        self.alarm_book = AlarmBook(clock, alarm_event_ids)
        self.alarms = OpcUaAlarms(self.alarm_book, 2)
        self.host, self.port, self.path = host, port, path
        self.security = security or OpcUaSecurity()
        self.ns_index = 2
        self._server: Any = None
        self._running = False
        self._written: dict[str, Any] = {}
        self._versions: dict[str, int] = {}
        self._heads: dict[str, int] = {}
        self._events: dict[str, Any] = {}

    @property
    def endpoint(self) -> str:
        return f"opc.tcp://{self.host}:{self.port}{self.path}"

    def layout(self, controller: Controller) -> NodeLayout:
        return NodeLayout(controller, self.ns_index)

    async def init(self) -> None:
        """Build the server and the address space (the slow part, ~2 s)."""
        sec = self.security
        server = Server(user_manager=_Users(sec.users) if sec.users else None)
        await server.init()
        server.disable_clock(True)
        await server.set_application_uri(SERVER_URI)
        server.set_security_policy([POLICIES[p] for p in sec.policies])
        if sec.certificate and sec.private_key:
            await server.load_certificate(str(sec.certificate))
            await server.load_private_key(str(sec.private_key))
        if sec.trusted_dir:
            store = TrustStore([sec.trusted_dir], [])
            await store.load()
            opts = CertificateValidatorOptions.TRUSTED_VALIDATION | CertificateValidatorOptions.PEER_CLIENT
            server.set_certificate_validator(CertificateValidator(opts, store))
        if sec.users:
            server.set_identity_tokens([ua.UserNameIdentityToken])
        self.ns_index = await server.register_namespace(NAMESPACE)
        self.alarms.ns_index = self.ns_index
        await self.alarms.install(server)
        etype = await self._add_event_type(server)
        for ctrl in self.controllers:
            obj = await self._add_controller(server, ctrl)
            self._events[ctrl.name] = await server.get_event_generator(etype, obj)
        self._server = server

    async def start(self) -> None:
        """Listen (port 0 picks a free port, kept for restarts) and publish the current model."""
        if self._server is None:
            await self.init()
        self._server.set_endpoint(self.endpoint)
        await self._server.start()
        self.port = int(self._server.bserver.port)
        self._running = True
        await self.sync()

    async def stop(self) -> None:
        if self._running:
            self._running = False
            await self._server.stop()

    async def restart_server(self, *, keep_alarms: bool = True) -> None:
        """Stop and start again on the same port: sessions drop, ServerStatus/StartTime changes.

        Alarm conditions survive with ``keep_alarms`` (an S7-1500 keeps pending alarms) or are
        lost (node-opcua starts empty); either way EventIds start a new generation."""
        await self.stop()
        self.alarm_book.restart(keep=keep_alarms)
        self.alarms.forget_objects()
        await self.start()

    def reset_alarms(self, event_ids: EventIdKind | None = None) -> None:
        """Forget every alarm condition and the refreshes answered (one server shared by tests)."""
        self.alarm_book.reset(event_ids)
        self.alarms.forget_objects()
        self.alarms.refreshes.clear()
        self.alarms.refuse_refresh = None
        self.alarms.refused.clear()

    async def alarm(self, controller: str, condition: str, action: str) -> AlarmEvent:
        """One alarm transition (``activate``, ``acknowledge``, ``clear``) and its event to every
        subscription on the Server object (none while the server is stopped)."""
        ev = self.alarm_book.act(controller, condition, action)
        if self._running:
            await self.alarms.emit(ev)
        return ev

    async def cut_link(self) -> None:
        """Drop every connection and refuse new ones; the address space stays as it is."""
        await self.stop()

    async def restore_link(self) -> None:
        await self.start()

    async def sync(self) -> None:
        """Publish every controller's changes since the last sync, and one event per new ring entry."""
        if self._server is None:
            return
        for ctrl in self.controllers:
            if self._versions.get(ctrl.name) == ctrl.version:
                continue
            await self._write_controller(ctrl)
            await self._emit_events(ctrl)
            self._versions[ctrl.name] = ctrl.version

    async def _add_event_type(self, server: Any) -> Any:
        # String node ids (not the numeric ones create_custom_event_type makes) so that the
        # agent config can name the type without browsing.
        idx = self.ns_index
        base = server.get_node(ua.ObjectIds.BaseEventType)
        etype = await base.add_object_type(ua.NodeId("TransitionEventType", idx), "TransitionEventType")
        for name, vtype in EVENT_FIELDS:
            nid = ua.NodeId(f"TransitionEventType.{name}", idx)
            await etype.add_property(
                nid, ua.QualifiedName(name, idx), ua.get_default_value(vtype), varianttype=vtype
            )
        return etype

    async def _add_controller(self, server: Any, ctrl: Controller) -> Any:
        lay, idx = self.layout(ctrl), self.ns_index

        async def var(parent: Any, parts: tuple[str, ...], value: Any, vtype: Any) -> None:
            await parent.add_variable(ua.NodeId(lay.sid(*parts), idx), parts[-1], ua.Variant(value, vtype))

        obj = await server.nodes.objects.add_object(ua.NodeId(lay.sid(), idx), ctrl.name)
        if ctrl.has_boot_id:
            await var(obj, ("BootId",), 0, U32)
        for spec in ctrl.channels:
            ch = await obj.add_object(ua.NodeId(lay.sid(spec.name), idx), spec.name)
            await var(ch, (spec.name, "TransitionId"), 0, U16 if spec.counter_bits == 16 else U32)
            await var(ch, (spec.name, "State"), 0, U16)
            await var(ch, (spec.name, "SourceTime"), 0, U64)
        ring = await obj.add_object(ua.NodeId(lay.sid("Ring"), idx), "Ring")
        await var(ring, ("Ring", "Head"), 0, U32)
        await var(ring, ("Ring", "Capacity"), ctrl.ring_capacity, U16)
        for name, vtype in RING_TYPES.items():
            await var(ring, ("Ring", name), [0] * ctrl.ring_capacity, vtype)
        return obj

    async def _write(self, lay: NodeLayout, parts: tuple[str, ...], value: Any, vtype: Any, ms: int) -> None:
        """Write one node if its value or timestamp changed (unchanged writes would only add noise)."""
        sid = lay.sid(*parts)
        if self._written.get(sid) == (value, ms):
            return
        dv = ua.DataValue(
            ua.Variant(value, vtype), SourceTimestamp=_dt(ms), ServerTimestamp=datetime.now(UTC)
        )
        await self._server.write_attribute_value(ua.NodeId(sid, self.ns_index), dv)
        self._written[sid] = (value, ms)

    async def _write_controller(self, ctrl: Controller) -> None:
        lay, now = self.layout(ctrl), ctrl.now_ms()
        slots = ctrl.ring_slots()
        columns: dict[str, list[int]] = {
            "Seq": [e.seq if e else 0 for e in slots],
            "Channel": [e.channel if e else 0 for e in slots],
            "State": [e.state if e else 0 for e in slots],
            "TransitionId": [e.transition_id if e else 0 for e in slots],
            "BootId": [e.boot_id if e else 0 for e in slots],
            "SourceTime": [e.source_time_ms if e else 0 for e in slots],
        }
        for name, values in columns.items():
            await self._write(lay, ("Ring", name), values, RING_TYPES[name], now)
        if ctrl.boot_id is not None:
            await self._write(lay, ("BootId",), ctrl.boot_id, U32, ctrl.boot_time_ms)
        for i, spec in enumerate(ctrl.channels):
            live = ctrl.channel(i)
            ms = live.source_time_ms or ctrl.boot_time_ms
            tid_type = U16 if spec.counter_bits == 16 else U32
            await self._write(lay, (spec.name, "TransitionId"), live.transition_id, tid_type, ms)
            await self._write(lay, (spec.name, "State"), live.state, U16, ms)
            await self._write(lay, (spec.name, "SourceTime"), live.source_time_ms, U64, ms)
        await self._write(lay, ("Ring", "Head"), ctrl.head, U32, now)

    async def _emit_events(self, ctrl: Controller) -> None:
        """One TransitionEventType event per ring entry written since the last sync (BootId 0 = none)."""
        last = self._heads.get(ctrl.name, 0)
        self._heads[ctrl.name] = ctrl.head
        if not self._running:
            return
        new = min((ctrl.head - last) % 2**32, ctrl.ring_capacity)
        gen = self._events[ctrl.name]
        for entry in ctrl.ring_entries()[-new:] if new else []:
            spec = ctrl.channels[entry.channel]
            gen.event.Channel = spec.name
            gen.event.TransitionId = entry.transition_id
            gen.event.BootId = entry.boot_id
            gen.event.State = entry.state
            gen.event.StateName = spec.values.get(entry.state, str(entry.state))
            gen.event.SourceTime = entry.source_time_ms
            gen.event.Severity = 500
            await gen.trigger(
                time_attr=_dt(entry.source_time_ms), message=f"{spec.name} -> {gen.event.StateName}"
            )
