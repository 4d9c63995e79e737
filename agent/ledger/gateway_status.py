"""The latest status record of each gateway (operator.md section 3): kept apart from the events.

A gateway publishes a small JSON object every `status_every` seconds: its site and name, its
version, the backlog and oldest pending age of each upstream, its store's room, each device's
link. It has no identity and is never an event: it never enters the event tables, only
`gateway_status`, one row per gateway keyed by (site, gateway) (two sites' `gw-1` are two
gateways), replaced only by a strictly newer record: the same record again (a broker delivers
a retained record on every subscription) or an older one arriving late changes nothing, so it
cannot make a dead gateway look heard (operator.md section 3). The fleet reads a status as heard
at its own `at`, never later than it was received (`agent.ledger.web.queries.FLEET`).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import psycopg

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

STATUS_TYPE = "io.edgeagent.gateway_status"
MAX_BYTES = 64 * 1024


class BadStatus(ValueError):
    """Not a status record (the reason says why); nothing is stored."""


def parse(body: bytes) -> dict[str, Any]:
    """The status object from a message body, checked: a site, a gateway name, a time, optional parts."""
    if len(body) > MAX_BYTES:
        raise BadStatus(f"status record over {MAX_BYTES} bytes")
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise BadStatus(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise BadStatus("not a JSON object")
    gw = doc.get("gateway")
    if not isinstance(gw, str) or not gw or len(gw) > 200:
        raise BadStatus("`gateway` must be a non-empty name")
    site = doc.get("site")
    if not isinstance(site, str) or not site or len(site) > 200:
        raise BadStatus("`site` must be a non-empty name (the fleet is keyed by site and gateway)")
    at = doc.get("at")
    if not isinstance(at, str):
        raise BadStatus("`at` must be an RFC 3339 time")
    try:
        when = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError as exc:
        raise BadStatus(f"`at` is not a time: {at!r}") from exc
    if when.tzinfo is None:
        raise BadStatus("`at` has no time zone")
    for part in ("upstreams", "devices"):
        if part in doc and not isinstance(doc[part], dict):
            raise BadStatus(f"`{part}` must be an object")
    return doc


UPSERT = """
INSERT INTO gateway_status AS s (site, gateway, agent_version, reported_at, received_at, via, status)
VALUES (%(site)s, %(gateway)s, %(version)s, %(at)s, now(), %(via)s, %(status)s::jsonb)
ON CONFLICT (site, gateway) DO UPDATE SET agent_version = EXCLUDED.agent_version,
  reported_at = EXCLUDED.reported_at, received_at = EXCLUDED.received_at, via = EXCLUDED.via,
  status = EXCLUDED.status
WHERE s.reported_at IS NULL OR EXCLUDED.reported_at > s.reported_at
"""


# The MQTT Will of a gateway process (`state: offline`): marks the record kept offline when it is
# that process's (same `session`) and still running. Its `at` is the session's start: it moves no
# "last heard"; a Will of an earlier process, or one delivered again, changes nothing new.
OFFLINE = """
UPDATE gateway_status SET status = status || jsonb_build_object(
  'state', 'offline', 'offline_reason', %(reason)s::text, 'offline_seen_at', now())
WHERE site = %(site)s AND gateway = %(gateway)s AND status->>'session' = %(session)s
  AND coalesce(status->>'state', 'running') = 'running'
"""


async def record(conn: Conn, status: dict[str, Any], via: str) -> bool:
    """Keep `status` (checked by `parse`) as its (site, gateway)'s latest (committed). False when
    the one kept is not older (a repeat of it, or a newer one). An `offline` record (the gateway's
    MQTT Will) marks the record of its own session offline instead (False when it is not that
    session's)."""
    if status.get("state") == "offline":
        reason = status.get("reason")
        session = status.get("session")
        cur = await conn.execute(
            OFFLINE,
            {
                "site": status["site"],
                "gateway": status["gateway"],
                "session": session if isinstance(session, str) else None,
                "reason": reason if isinstance(reason, str) else "offline",
            },
        )
        await conn.commit()
        return cur.rowcount == 1
    version = status.get("agent_version")
    cur = await conn.execute(
        UPSERT,
        {
            "site": status["site"],
            "gateway": status["gateway"],
            "version": version if isinstance(version, str) else None,
            "at": status["at"],
            "via": via,
            "status": json.dumps(status, ensure_ascii=False),
        },
    )
    await conn.commit()
    return cur.rowcount == 1
