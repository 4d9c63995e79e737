"""Opening an OPC UA session the agent can trust: a bounded client, a checked certificate, nodes.

Holds the client factory, the security set-up, node resolution, subscriptions and the mapping
of asyncua's failures to SourceUnavailable. It must not read values or build snapshots.

The server's certificate is taken from its endpoint list, checked against the trust list and
then pinned for the secure channel (no trust on first use, :mod:`agent.sources.opcua.trust`).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncua

from agent.config.sources import Device, OpcUa
from agent.core.errors import SourceUnavailable
from agent.sources.opcua.events import EVENT_SELECT
from agent.sources.opcua.trust import (
    describe,
    first_certificate,
    load_trust_list,
    read_certificate,
    untrusted_reason,
)
from agent.sources.readings import channel_fields

ua: Any = asyncua.ua
Client: Any = asyncua.Client  # type: ignore[attr-defined]
START_TIME = "i=2257"  # Server_ServerStatus_StartTime
UA_ERRORS = (ConnectionError, OSError, TimeoutError, asyncio.TimeoutError)
# Events the server may hold for us between two publishes. A server that holds more drops the
# oldest (the agent then records the gap). 1,000 overflowed at 5,000 transitions/s whenever the
# agent's loop was busy for 0.2 s (bench/opcua_subscribe.py); servers revise it down to their cap.
EVENT_QUEUE_SIZE = 10_000

POLICY_CLASSES = {
    "Basic256Sha256": "SecurityPolicyBasic256Sha256",
    "Aes128_Sha256_RsaOaep": "SecurityPolicyAes128Sha256RsaOaep",
    "Aes256_Sha256_RsaPss": "SecurityPolicyAes256Sha256RsaPss",
}
TOO_LARGE = ("BadRequestTooLarge", "BadResponseTooLarge")
# What asyncua's decoder lets through for a malformed or hostile answer (a Variant nested
# thousands deep is a RecursionError); mapped at this boundary so one server cannot stop the agent.
UNDECODABLE = (RecursionError, struct.error, UnicodeDecodeError)
# These are decoding errors only when asyncua raised them; raised by our own code they are bugs,
# which must reach the supervisor (logged with a traceback, counted), never pass as "undecodable".
UNDECODABLE_IN_ASYNCUA = (ValueError, TypeError, IndexError, KeyError)


def raised_in_asyncua(exc: BaseException) -> bool:
    """Whether ``exc`` came out of asyncua's code rather than ours: the innermost frame of its
    traceback that is either asyncua's or ours is asyncua's (below it may be the standard
    library, e.g. ``enum`` refusing a NodeIdType while asyncua decodes)."""
    tb, owner = exc.__traceback__, ""
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module.startswith(("asyncua.", "agent.")):
            owner = module
        tb = tb.tb_next
    return owner.startswith("asyncua.")


def undecodable(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "values nested deeper than can be decoded"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def ua_error_text(what: str, exc: Exception, max_message_size: int) -> str:
    name = type(exc).__name__
    if name in TOO_LARGE:
        return (
            f"{what}: the response is larger than max_message_size ({max_message_size} "
            f"bytes): a node serves a value too large to read ({name})"
        )
    return f"{what}: {name} {exc}"


@contextlib.contextmanager
def link_errors(refused: str, failed: str, answer: str, max_message_size: int) -> Iterator[None]:
    """asyncua's failures as SourceUnavailable: ``refused`` (a UA error or an answer that cannot
    be decoded, called ``answer``) or ``failed`` (the link)."""
    try:
        yield
    except ua.UaError as exc:
        raise SourceUnavailable(ua_error_text(refused, exc, max_message_size)) from exc
    except UA_ERRORS as exc:
        raise SourceUnavailable(f"{failed}: {exc or type(exc).__name__}") from exc
    except UNDECODABLE as exc:  # asyncua decodes a response in the awaiting task
        raise SourceUnavailable(f"{refused}: {answer} cannot be decoded ({undecodable(exc)})") from exc
    except UNDECODABLE_IN_ASYNCUA as exc:
        if not raised_in_asyncua(exc):
            raise
        raise SourceUnavailable(f"{refused}: {answer} cannot be decoded ({undecodable(exc)})") from exc


@contextlib.contextmanager
def channel_refusal(conn: OpcUa) -> Iterator[None]:
    """A server that will not open the secure channel as SourceUnavailable naming our certificate.

    node-opcua, when it does not trust the client's certificate, files it under rejected/ and
    closes the connection; asyncua (1.1) then ends OpenSecureChannel on a bare AssertionError,
    with no status (tests/integration/test_opcua_node_peer.py).
    """
    try:
        yield
    except AssertionError as exc:
        if not raised_in_asyncua(exc):
            raise
        ours = ""
        if not conn.security.insecure and conn.security.certificate:
            cert = describe(read_certificate(Path(conn.security.certificate)))
            ours = f" ({cert.subject}, thumbprint {cert.thumbprint})"
        raise SourceUnavailable(
            "refused: the server closed the connection instead of opening the secure channel (no"
            f" status given). A server that does not trust the agent's certificate{ours} does so:"
            " add it to the server's trusted certificates (many servers file it under rejected/"
            " until an administrator moves it)"
        ) from exc


async def namespace_index(client: Any, uri: str) -> int:
    """The index of the configured namespace URI in the server's namespace array; a URI the
    server does not serve is named with the array it does serve (not asyncua's "not in list")."""
    names = [str(n) for n in await client.get_namespace_array()]
    if uri not in names:
        shown = ", ".join(f"[{i}] {n}" for i, n in enumerate(names))
        raise SourceUnavailable(
            f"namespace URI {uri!r} is not in the server's namespace array ({shown}): "
            "check `namespace:` in the device's config"
        )
    return names.index(uri)


class BoundedClient(Client):  # type: ignore[misc]
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


def new_client(conn: OpcUa, lost: asyncio.Event) -> Any:
    """A client for ``conn`` (asyncua's own reconnect off) that sets ``lost`` when the link drops."""
    client = BoundedClient(conn.endpoint, timeout=conn.timeout, watchdog_intervall=max(conn.timeout, 0.5))
    client.session_timeout = 600_000
    client.max_messagesize = conn.max_message_size
    client.max_chunkcount = conn.max_message_size // 8192 + 1  # asyncua's chunks are 8-64 KiB

    async def on_lost(exc: Exception) -> None:
        lost.set()

    client.connection_lost_callback = on_lost
    return client


async def secure(client: Any, conn: OpcUa) -> None:
    """Security as configured: the server's certificate checked and pinned, then the user."""
    if not conn.security.insecure:
        await _pin_server(client, conn)
    if conn.username:
        client.set_user(conn.username)
        if conn.password_file:
            # Read on every connect: a rotated credential is picked up without a restart.
            client.set_password(Path(conn.password_file).read_text(encoding="utf-8").rstrip("\r\n"))


async def _pin_server(client: Any, conn: OpcUa) -> None:
    """The server's certificate from its endpoint list, checked against the trust list, then
    pinned for the secure channel and for CreateSession."""
    from asyncua.crypto import security_policies

    sec = conn.security
    policy = getattr(security_policies, POLICY_CLASSES[sec.policy])
    der = await server_certificate(client, policy.URI, sec.mode)
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


async def server_certificate(client: Any, uri: str, mode: str) -> bytes:
    """The certificate of the server's endpoint for our policy and mode (not yet trusted)."""
    endpoints = await client.connect_and_get_server_endpoints()
    for ep in endpoints:
        if ep.SecurityPolicyUri == uri and ep.SecurityMode == getattr(ua.MessageSecurityMode, mode):
            return first_certificate(bytes(ep.ServerCertificate or b""))
    offered = sorted({f"{e.SecurityPolicyUri.rsplit('#', 1)[-1]}/{e.SecurityMode.name}" for e in endpoints})
    raise SourceUnavailable(
        f"the server offers no {uri.rsplit('#', 1)[-1]}/{mode} endpoint (it offers {', '.join(offered)})"
    )


def node(client: Any, text: str, idx: int | None) -> Any:
    """The node of a configured id, in the namespace resolved at connect (``idx``) when not 0."""
    nid = ua.NodeId.from_string(text)
    if idx is not None and nid.NamespaceIndex != 0:
        nid = ua.NodeId(nid.Identifier, idx, nid.NodeIdType)
    return client.get_node(nid)


def resolve_nodes(client: Any, dev: Device, idx: int | None) -> tuple[list[str], list[Any]]:
    """Node objects in read order, and the key naming each (``boot``, ``Trip.state``, ``ring.Seq`` ...)."""
    wanted: list[tuple[str, str]] = [("start_time", START_TIME)]
    if dev.boot_id is not None and dev.boot_id.node:
        wanted.append(("boot", dev.boot_id.node))
    for ch in dev.channels:
        for name, f in channel_fields(ch):
            if f.node:
                wanted.append((f"{ch.name}.{name}", f.node))
    ring = dev.ring
    if ring is not None:
        for name, f in (("head", ring.head), ("capacity", ring.capacity), *ring.fields.items()):
            if f.node:
                wanted.append((f"ring.{name}", f.node))
    return [k for k, _ in wanted], [node(client, text, idx) for _, text in wanted]


async def event_filter(event_type: Any, fields: Iterable[str]) -> Any:
    """asyncua's filter for ``event_type`` (its where clause), selecting only ``fields``.

    asyncua selects every property of the type and its supertypes by default (19 for the
    simulator's TransitionEventType), and decoding them was most of the client's work per event.
    """
    from asyncua.common.events import get_filter_from_event_type

    wanted = set(fields)
    evfilter = await get_filter_from_event_type([event_type])
    evfilter.SelectClauses = [
        c for c in evfilter.SelectClauses if len(c.BrowsePath) == 1 and c.BrowsePath[0].Name in wanted
    ]
    return evfilter


async def subscribe(
    client: Any, conn: OpcUa, dev: Device, watched: list[Any], handler: Any, idx: int | None
) -> None:
    """Data changes of ``watched`` (and, with ``events`` mapped, events) notify ``handler``.

    Nothing to watch and no events: no subscription is made. An empty CreateMonitoredItems is
    never sent: node-opcua (like the specification) answers it ``BadNothingToDo``, which failed
    every connect of an alarms-only device with ``subscribe: true``."""
    if not watched and dev.events is None:
        return
    sub = await client.create_subscription(conn.publishing * 1000, handler)
    if watched:
        await sub.subscribe_data_change(watched, queuesize=100)
    if dev.events is not None:
        event_type = node(client, dev.events.type, idx)
        await sub.subscribe_events(
            node(client, dev.events.node, idx),
            event_type,
            evfilter=await event_filter(event_type, EVENT_SELECT),
            queuesize=EVENT_QUEUE_SIZE,
        )
