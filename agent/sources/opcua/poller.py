"""OPC UA source (asyncua 2.1): all of a device's nodes in one Read, optionally driven by subscriptions.

Every poll is one ``read_attributes`` call with every node of the device (boot id, channel
fields, ring head and arrays, and ``ServerStatus/StartTime`` as restart evidence), so one
snapshot is consistent and the Bad status of one node fails only that field.

With ``subscribe: true`` a data-change subscription on the boot id and the transition
counters (and, with ``events`` mapped, an event subscription) only *triggers* that read: it
never assembles a snapshot from notifications, because asyncua delivers them grouped per
monitored item, not in order. A reconciling read also runs on every (re)connect and every
``reconcile`` interval, because asyncua 2.1 can leave a subscription silently empty after a
reconnect (library notes, section 2). Event notifications carry the full identity of a
transition (Channel, TransitionId, BootId, State, SourceTime) and are delivered as they come.

Handlers are synchronous and only set an event / append to a list: asyncua 2.x runs each
notification in its own task, and async handlers finish out of order.

Reconnect: on any failure the client is dropped and a new one is built from scratch (new
session, new subscriptions, namespace index resolved again) after a capped, jittered backoff
(:func:`agent.sources.base.run_source`); asyncua's own auto-reconnect is off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncua

from agent.config.sources import Channel, Device, Field, OpcUa
from agent.core.contract import format_timestamp
from agent.core.errors import SourceUnavailable
from agent.core.snapshot import ChannelRead, Observations, RingItem, RingRead, Snapshot
from agent.core.tracker import DeviceTracker
from agent.sources.base import StateLog
from agent.sources.opcua.trust import (
    describe,
    first_certificate,
    load_trust_list,
    read_certificate,
    untrusted_reason,
)
from agent.sources.opcua.values import array_problem, scalar_problem
from agent.sources.readings import (
    BadValue,
    boot_number,
    channel_fields,
    channel_read,
    identity_number,
    merge,
    payload_value,
    ring_channel,
    ring_item,
    timestamp_value,
)

log = logging.getLogger(__name__)
logging.getLogger("asyncua").setLevel(logging.CRITICAL)  # it logs tracebacks once per second while down

ua: Any = asyncua.ua
Client: Any = asyncua.Client  # type: ignore[attr-defined]
START_TIME = "i=2257"  # Server_ServerStatus_StartTime
UA_ERRORS = (ConnectionError, OSError, TimeoutError, asyncio.TimeoutError)


POLICY_CLASSES = {
    "Basic256Sha256": "SecurityPolicyBasic256Sha256",
    "Aes128_Sha256_RsaOaep": "SecurityPolicyAes128Sha256RsaOaep",
    "Aes256_Sha256_RsaPss": "SecurityPolicyAes256Sha256RsaPss",
}
TOO_LARGE = ("BadRequestTooLarge", "BadResponseTooLarge")
# What asyncua's decoder lets through for a malformed or hostile answer (a Variant nested
# thousands deep is a RecursionError); mapped at this boundary so one server cannot stop the agent.
UNDECODABLE = (RecursionError, struct.error, UnicodeDecodeError, ValueError, TypeError, IndexError, KeyError)


def _undecodable(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "values nested deeper than can be decoded"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


class _BoundedClient(Client):  # type: ignore[misc]
    """asyncua's Client with a receive limit it cannot be talked out of.

    asyncua sends ``max_messagesize``/``max_chunkcount`` in its Hello, but then replaces its own
    receive limits with whatever the server's Acknowledge says (its server says 100 MB), and its
    server ignores the client's limits when it answers. So after the Hello the limits of this
    connection are set back to ours: a larger response is dropped chunk by chunk as it arrives
    (``BadRequestTooLarge``), never assembled in memory.
    """

    async def send_hello(self) -> None:
        await super().send_hello()
        protocol = self.uaclient.protocol
        limits = getattr(getattr(protocol, "_connection", None), "_limits", None)
        if limits is None:  # asyncua changed inside: refuse rather than run without a limit
            raise SourceUnavailable("cannot set the OPC UA message size limit (asyncua changed)")
        limits.max_message_size = self.max_messagesize
        limits.max_chunk_count = self.max_chunkcount


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


def _ts(value: Any) -> str | None:
    if not isinstance(value, datetime):
        return None
    return format_timestamp(value if value.tzinfo else value.replace(tzinfo=UTC))


class _Handler:
    """asyncua subscription handler: synchronous on purpose (see the module docstring)."""

    def __init__(self) -> None:
        self.trigger = asyncio.Event()
        self.events: list[Any] = []

    def datachange_notification(self, node: Any, val: Any, data: Any) -> None:
        self.trigger.set()

    def event_notification(self, event: Any) -> None:
        self.events.append(event)
        self.trigger.set()

    def status_change_notification(self, status: Any) -> None:
        self.trigger.set()


class OpcUaSource:
    """One OPC UA connection of one device."""

    def __init__(self, device: Device, conn: OpcUa, *, clock: Callable[[], str] = _now) -> None:
        self.dev, self.conn, self.clock = device, conn, clock
        self.device, self.receiver = device.name, conn.receiver
        self.tracker = DeviceTracker(device.name, ring_mapped=device.ring is not None)
        self.client: Any = None
        self.keys: list[str] = []
        self.nodes: list[Any] = []
        self.handler = _Handler()
        self.lost = asyncio.Event()
        self.next_reconcile = 0.0
        self.errors = StateLog(log, f'Device "{device.name}" ({self.receiver})')
        self.polls = 0
        if conn.security.insecure:  # built once at start-up: the warning is said once per start
            log.warning(
                'Device "%s" (%s): OPC UA security policy None (configured explicitly): the traffic is '
                "neither signed nor encrypted, and the server is not authenticated",
                device.name,
                self.receiver,
            )

    # --- Source protocol ---------------------------------------------------------------------

    async def connect(self) -> None:
        c = self.conn
        client = _BoundedClient(c.endpoint, timeout=c.timeout, watchdog_intervall=max(c.timeout, 0.5))
        client.session_timeout = 600_000
        client.max_messagesize = c.max_message_size
        client.max_chunkcount = c.max_message_size // 8192 + 1  # asyncua's chunks are 8-64 KiB
        self.client, self.lost = client, asyncio.Event()
        lost = self.lost

        async def on_lost(exc: Exception) -> None:
            lost.set()

        client.connection_lost_callback = on_lost
        try:
            async with asyncio.timeout(c.timeout * 3):
                await self._secure(client)
            async with asyncio.timeout(c.timeout * 3):
                await client.connect()
                idx = await client.get_namespace_index(self.dev.namespace) if self.dev.namespace else None
                self._resolve(client, idx)
                if c.subscribe:
                    await self._subscribe(client, idx)
        except ua.UaError as exc:
            raise SourceUnavailable(self._ua_error("refused", exc)) from exc
        except UA_ERRORS as exc:
            raise SourceUnavailable(f"cannot connect: {exc or type(exc).__name__}") from exc
        except UNDECODABLE as exc:
            raise SourceUnavailable(f"refused: an answer cannot be decoded ({_undecodable(exc)})") from exc
        self.tracker.reconnected()
        self.next_reconcile = 0.0

    def _ua_error(self, what: str, exc: Exception) -> str:
        name = type(exc).__name__
        if name in TOO_LARGE:
            return (
                f"{what}: the response is larger than max_message_size ({self.conn.max_message_size} "
                f"bytes): a node serves a value too large to read ({name})"
            )
        return f"{what}: {name} {exc}"

    async def _secure(self, client: Any) -> None:
        """Security as configured: the server's certificate from its endpoint list, checked
        against the trust list, then pinned for the secure channel (opcua_trust)."""
        c, sec = self.conn, self.conn.security
        if not sec.insecure:
            from asyncua.crypto import security_policies

            policy = getattr(security_policies, POLICY_CLASSES[sec.policy])
            der = await self._server_certificate(client, policy.URI, sec.mode)
            trust = load_trust_list(sec.server_certificate, sec.trusted)
            where = " or ".join(x for x in (sec.server_certificate, sec.trusted) if x) or "the trust list"
            reason = untrusted_reason(der, trust, datetime.now(UTC), where)
            if reason is not None:
                raise SourceUnavailable(reason)
            assert sec.certificate is not None and sec.private_key is not None  # the loader checks
            ours = describe(read_certificate(Path(sec.certificate)))
            client.application_uri = sec.application_uri or ours.uri or client.application_uri
            await client.set_security(
                policy,
                certificate=sec.certificate,
                private_key=sec.private_key,
                server_certificate=der,
                mode=getattr(ua.MessageSecurityMode, sec.mode),
            )

            async def validate(cert: Any, app: Any) -> None:  # CreateSession: the same certificate
                from cryptography.hazmat.primitives.serialization import Encoding

                if cert.public_bytes(Encoding.DER) != der:
                    raise ua.UaError("the server changed its certificate during the handshake")

            client.certificate_validator = validate
        if c.username:
            client.set_user(c.username)
            if c.password_file:
                # Read on every connect: a rotated credential is picked up without a restart.
                client.set_password(Path(c.password_file).read_text(encoding="utf-8").rstrip("\r\n"))

    async def _server_certificate(self, client: Any, uri: str, mode: str) -> bytes:
        """The certificate of the server's endpoint for our policy and mode (not yet trusted)."""
        endpoints = await client.connect_and_get_server_endpoints()
        for ep in endpoints:
            if ep.SecurityPolicyUri == uri and ep.SecurityMode == getattr(ua.MessageSecurityMode, mode):
                return first_certificate(bytes(ep.ServerCertificate or b""))
        offered = sorted(
            {f"{e.SecurityPolicyUri.rsplit('#', 1)[-1]}/{e.SecurityMode.name}" for e in endpoints}
        )
        raise SourceUnavailable(
            f"the server offers no {uri.rsplit('#', 1)[-1]}/{mode} endpoint (it offers {', '.join(offered)})"
        )

    async def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            with contextlib.suppress(Exception):  # the peer may be gone; closing must not fail the loop
                async with asyncio.timeout(2):
                    await client.disconnect()

    async def wait(self, stop: asyncio.Event) -> None:
        if self.lost.is_set():
            raise SourceUnavailable("connection lost")
        if not self.conn.subscribe:
            delay = self.dev.poll - (time.monotonic() % self.dev.poll)
        else:
            delay = max(0.0, self.next_reconcile - time.monotonic())
        waits = [asyncio.ensure_future(e.wait()) for e in (stop, self.lost, self.handler.trigger)]
        if not self.conn.subscribe:
            waits.pop()  # plain reads: only the poll interval, stop or loss end the wait
        try:
            await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        if self.lost.is_set() and not stop.is_set():
            raise SourceUnavailable("connection lost")

    async def poll(self) -> Observations:
        self.polls += 1
        self.handler.trigger.clear()
        events, self.handler.events = self.handler.events, []
        if self.conn.subscribe:
            self.next_reconcile = time.monotonic() + self.conn.reconcile
        read_at = self.clock()
        first = self.tracker.observe_entries(
            [e for e in (self._event_item(ev) for ev in events) if e is not None],
            read_at=read_at,
            receiver=self.receiver,
        )
        snap = await self.snapshot()
        return merge(first, self.tracker.observe(snap))

    async def probe(self) -> Snapshot:
        """One read of every node, without touching the tracker (``check --probe``)."""
        return await self.snapshot()

    # --- nodes and reads ---------------------------------------------------------------------

    def _node(self, client: Any, text: str, idx: int | None) -> Any:
        nid = ua.NodeId.from_string(text)
        if idx is not None and nid.NamespaceIndex != 0:
            nid = ua.NodeId(nid.Identifier, idx, nid.NodeIdType)
        return client.get_node(nid)

    def _resolve(self, client: Any, idx: int | None) -> None:
        """Node objects in read order; ``keys`` names each (``boot``, ``Trip.state``, ``ring.Seq`` ...)."""
        wanted: list[tuple[str, str]] = [("start_time", START_TIME)]
        if self.dev.boot_id is not None and self.dev.boot_id.node:
            wanted.append(("boot", self.dev.boot_id.node))
        for ch in self.dev.channels:
            for name, f in channel_fields(ch):
                if f.node:
                    wanted.append((f"{ch.name}.{name}", f.node))
        ring = self.dev.ring
        if ring is not None:
            for name, f in (("head", ring.head), ("capacity", ring.capacity), *ring.fields.items()):
                if f.node:
                    wanted.append((f"ring.{name}", f.node))
        self.keys = [k for k, _ in wanted]
        self.nodes = [self._node(client, text, idx) for _, text in wanted]

    async def _subscribe(self, client: Any, idx: int | None) -> None:
        self.handler = _Handler()
        sub = await client.create_subscription(self.conn.publishing * 1000, self.handler)
        watch = [
            n
            for k, n in zip(self.keys, self.nodes, strict=True)
            if k == "boot" or k.endswith(".transition_id")
        ]
        await sub.subscribe_data_change(watch, queuesize=100)
        if self.dev.events is not None:
            await sub.subscribe_events(
                self._node(client, self.dev.events.node, idx),
                self._node(client, self.dev.events.type, idx),
                queuesize=1000,
            )

    async def snapshot(self) -> Snapshot:
        if self.client is None:
            raise SourceUnavailable("not connected")
        try:
            async with asyncio.timeout(self.conn.timeout):
                dvs = await self.client.read_attributes(self.nodes)
        except ua.UaError as exc:
            raise SourceUnavailable(self._ua_error("read refused", exc)) from exc
        except UA_ERRORS as exc:
            raise SourceUnavailable(f"read failed: {exc or type(exc).__name__}") from exc
        except UNDECODABLE as exc:  # asyncua decodes the response in the awaiting task
            raise SourceUnavailable(
                f"read refused: the response cannot be decoded ({_undecodable(exc)})"
            ) from exc
        if len(dvs) != len(self.keys):
            raise SourceUnavailable(f"read answered {len(dvs)} values for {len(self.keys)} nodes")
        read_at = self.clock()
        values: dict[str, Any] = {}
        stamps: dict[str, Any] = {}
        bad: dict[str, str] = {}
        for key, dv in zip(self.keys, dvs, strict=True):
            if not dv.StatusCode.is_good():
                bad[key] = dv.StatusCode.name
            elif (problem := self._value_problem(key, dv.Value.Value)) is not None:
                bad[key] = f"refused: {problem}"
            else:
                values[key] = dv.Value.Value
                stamps[key] = dv.SourceTimestamp
        boot, boot_error = None, None
        if self.dev.boot_id is not None:
            boot_error = bad.get("boot")
            if boot_error is None and values.get("boot") is not None:
                try:
                    boot = boot_number(values["boot"])
                except BadValue as exc:
                    boot_error = f"refused: {exc}"
            self.errors.set("boot id", f"status {boot_error}" if boot_error else None)
        reads = tuple(self._channel(ch, values, stamps, bad) for ch in self.dev.channels)
        ring, ring_error = self._ring(values, bad)
        return Snapshot(
            device=self.device,
            receiver=self.receiver,
            read_at=read_at,
            boot_id=boot,
            channels=reads,
            boot_where={"node": self.dev.boot_id.node} if self.dev.boot_id else {},
            boot_error=boot_error,
            start_time=_ts(values.get("start_time")),
            ring=ring,
            ring_error=ring_error,
        )

    def _value_problem(self, key: str, value: Any) -> str | None:
        ring = self.dev.ring
        if ring is not None and key.startswith("ring.") and key not in ("ring.head", "ring.capacity"):
            return array_problem(value, ring.slot_count)
        if key == "start_time" and value is not None and not isinstance(value, datetime):
            return f"{type(value).__name__} where a date-time is expected"
        return scalar_problem(value)

    def _channel(
        self, ch: Channel, values: dict[str, Any], stamps: dict[str, Any], bad: dict[str, str]
    ) -> ChannelRead:
        got: dict[str, Any] = {}
        raw: dict[str, Any] = {}
        errors = []
        for name, f in channel_fields(ch):
            key = f"{ch.name}.{name}"
            if key in bad:
                errors.append(f"{f.node}: {bad[key]}")
                raw[name] = {"node": f.node, "status": bad[key]}
            elif key in values:
                got[name] = values[key]
                raw[name] = {"node": f.node, "value": values[key]}
        if ch.time_from_state and f"{ch.name}.state" in stamps:
            got["source_timestamp"] = _ts(stamps[f"{ch.name}.state"])
        if errors:
            raw["error"] = "; ".join(errors)
        read = channel_read(ch, got, raw)
        self.errors.set(f"channel {ch.name}", read.error)
        self.errors.set(f"channel {ch.name} values", "; ".join(read.raw.get("flags", ())) or None)
        return read

    def _ring(self, values: dict[str, Any], bad: dict[str, str]) -> tuple[RingRead | None, str | None]:
        ring = self.dev.ring
        if ring is None:
            return None, None
        failed = [f"{k}: {v}" for k, v in bad.items() if k.startswith("ring.")]
        if failed or "ring.head" not in values:
            error = "; ".join(failed) or "ring head not read"
            self.errors.set("ring", error)
            return None, error
        self.errors.set("ring", None)
        arrays = {name: values.get(f"ring.{name}") or [] for name in ring.fields}
        count = min((len(a) for a in arrays.values()), default=0)
        entries: list[RingItem] = []
        for k in range(count):
            item = ring_item(self.dev, {name: arrays[name][k] for name in arrays})
            if item is not None:
                entries.append(item)
        head, cap = values["ring.head"], values.get("ring.capacity")
        if not _whole(head) or not (cap is None or _whole(cap)):
            error = f"ring head {head!r} or capacity {cap!r} is not a whole number"
            self.errors.set("ring", error)
            return None, error
        capacity = int(cap or ring.capacity.value or count)
        return RingRead(int(head), capacity, tuple(entries)), None

    def _event_item(self, ev: Any) -> RingItem | None:
        """A TransitionEventType event as an entry with full identity (BootId 0 = none); None for an
        event whose fields are refused (docs/pollers.md, "Bad values")."""
        fields = {
            k: getattr(ev, k, None) for k in ("Channel", "TransitionId", "BootId", "State", "SourceTime")
        }
        if any(scalar_problem(v) is not None for v in fields.values()):
            self.errors.set("events", f"event refused: a field is no single value ({sorted(fields)})")
            return None
        try:
            tid = identity_number(fields["TransitionId"] or 0)
            boot = boot_number(fields["BootId"] or 0)
        except BadValue as exc:
            self.errors.set("events", f"event refused: {exc}")
            return None
        ch = ring_channel(self.dev, fields["Channel"])
        state, _ = payload_value(fields["State"])
        if ch is None or state is None:
            return None
        self.errors.set("events", None)
        ts_field: Field | None = ch.source_timestamp
        stime = fields["SourceTime"]
        ts = timestamp_value(stime, ts_field)[0] if isinstance(stime, int) and ts_field else None
        if ch.time_from_state:
            ts = _ts(getattr(ev, "Time", None))
        return RingItem(
            seq=0,
            channel=ch.name,
            transition_id=tid,
            boot_id=boot,
            state=ch.state.values.get(state, state) if isinstance(state, int) else state,
            source_timestamp=ts,
            raw={"event": {**fields, "TransitionId": tid}},
        )


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
