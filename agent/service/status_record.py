"""The gateway's status record (operator.md section 3): what the fleet view and alerts need.

Every `status_every` (default 60 s) the service publishes on each upstream a small JSON object:
gateway, agent version, backlog and oldest pending age per upstream, the store's room, each
device connection's link and ticks missed. It is not an event: no identity, never in the outbox,
never retried (the next one replaces it); the ledger keeps the latest per gateway.

`state` says what the process is doing: `running` in every record, `stopped` in the last one of a
clean stop, and `offline` in the MQTT Will (`will()`), which the broker publishes (retained, on the
same topic) when a connection ends without a DISCONNECT: a crash, a power cut, the network. Every
record and the Will carry the process's `session` (when it started), so the ledger applies a Will
only to the records of the process that left it (operator.md section 3).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

from agent import __version__
from agent.service.metrics import pending_age_s

log = logging.getLogger(__name__)

SEND_TIMEOUT_S = 10.0
STATUS_TYPE = "io.edgeagent.gateway_status"
WILL_REASON = (
    "the connection ended without a stop (a crash, a power cut or the network): the broker's MQTT Will"
)


def will(*, site: str, gateway: str, session: str) -> bytes:
    """The MQTT Will's body: an `offline` record of this process (its `at` is the session's start:
    the broker publishes it unchanged, whenever the connection ends)."""
    body = {
        "type": STATUS_TYPE,
        "gateway": gateway,
        "site": site,
        "at": session,
        "agent_version": __version__,
        "state": "offline",
        "session": session,
        "reason": WILL_REASON,
    }
    return json.dumps(body, ensure_ascii=False).encode()


def build(
    *,
    site: str,
    gateway: str,
    at: str,
    now_s: float,
    outbox: Sequence[dict[str, Any]],
    store_room: int | None,
    connections: Sequence[dict[str, Any]],
    session: str | None = None,
    state: str = "running",
) -> dict[str, Any]:
    return {
        "type": STATUS_TYPE,
        "gateway": gateway,
        "site": site,
        "at": at,
        "agent_version": __version__,
        "state": state,
        "session": session,
        "upstreams": {
            u["upstream"]: {
                "backlog": u["pending"],
                "dead_letters": u["rejected"],
                "oldest_pending_age_s": round(pending_age_s(u.get("oldest_pending_at"), now_s), 3)
                if u.get("oldest_pending_at")
                else None,
                "awaiting_receipt": u.get("awaiting_receipt", 0),
                "oldest_awaiting_receipt_age_s": round(pending_age_s(u.get("oldest_awaiting_at"), now_s), 3)
                if u.get("oldest_awaiting_at")
                else None,
            }
            for u in outbox
        },
        "store_room_bytes": store_room,
        "devices": {
            f"{c['device']} {c['receiver']}": {
                "link": c["state"],
                "ticks_missed": c.get("ticks_missed", 0),
                "last_poll_at": c.get("last_poll_at"),
            }
            for c in connections
        },
    }


async def publish(sinks: Sequence[Any], gateway: str, record: dict[str, Any]) -> int:
    """Hand the record to every sink that takes status records; returns how many took it."""
    body = json.dumps(record, ensure_ascii=False).encode()
    sent = 0
    for sink in sinks:
        send = getattr(sink, "publish_status", None)
        if send is None:
            continue
        try:
            if await asyncio.wait_for(send(gateway, body), SEND_TIMEOUT_S):
                sent += 1
        except Exception as exc:  # a status record is best effort: the next one comes anyway
            log.debug("status record not sent on %s: %s", getattr(sink, "name", "?"), exc)
    return sent
