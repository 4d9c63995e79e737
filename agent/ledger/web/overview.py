"""The overview: the counts, and the fleet (each (site, gateway)'s last arrival and last status)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agent.ledger import retention_state
from agent.ledger.web import queries
from agent.ledger.web.common import POOL, SILENT_AFTER, export, export_format
from agent.ledger.web.render import render

COUNT_LINKS = {
    "events": "/events",
    "conflicts_open": "/conflicts?state=open",
    "pending_open": "/pending?state=open",
    "boots": "/timeline",
    "gaps": "/timeline",
    "notifications_dead": "/notifications?state=dead",
    "notifications_pending": "/notifications?state=pending",
}


def upstream_lines(status: dict[str, Any] | None) -> list[str]:
    """`mqtt: 12 waiting, oldest 40 s` per upstream, as the gateway's last status said."""
    if not status:
        return []
    out = []
    for name, up in sorted((status.get("upstreams") or {}).items()):
        if isinstance(up, dict):
            age = up.get("oldest_pending_age_s")
            age_text = "" if age is None else f", oldest {float(age):.0f} s"
            out.append(f"{name}: {up.get('backlog', '?')} waiting{age_text}")
    return out


def fleet_rows(rows: list[dict[str, Any]], silent_after: float) -> list[dict[str, Any]]:
    """Each (site, gateway) with `silent` set when nothing (arrival or status) came for `silent_after`
    s. `site` is None when not known (arrivals of an import line or a rejected one: no site)."""
    out = []
    for r in rows:
        silent_s = r["silent_s"]
        status = r["status"] or {}
        out.append(
            {
                "site": r["site"] or None,
                "gateway": r["gateway"],
                "last_arrival": r["last_arrival"],
                "status_heard_at": r["status_heard_at"],
                "agent_version": r["agent_version"],
                "upstreams": upstream_lines(status),
                "store_room_bytes": status.get("store_room_bytes"),
                "devices": status.get("devices"),
                "silent_s": None if silent_s is None else float(silent_s),
                "silent": silent_s is not None and float(silent_s) > silent_after,
                # `offline`: the broker published the gateway's MQTT Will (its connection ended
                # without a stop); `stopped`: its last record said so; `running` or None otherwise.
                "state": status.get("state"),
                # A record stamped later than the ledger received it: the gateway's clock runs
                # ahead; the record is heard at its arrival, never in the future (clamped).
                "clock_ahead_s": _ahead(r.get("clock_ahead_s")),
            }
        )
    return out


CLOCK_AHEAD_S = 5.0  # beyond this a gateway's clock is said to run ahead of the ledger's


def _ahead(seconds: Any) -> float | None:
    return float(seconds) if seconds is not None and float(seconds) > CLOCK_AHEAD_S else None


async def totals(conn: queries.Conn) -> tuple[dict[str, Any], set[str]]:
    """The overview's counts, and which of them are estimates (a big table's, see EXACT_UP_TO)."""
    estimates = {r["relname"]: int(r["n"]) for r in await queries.fetch(conn, queries.ESTIMATES)}
    counts: dict[str, Any] = {}
    estimated: set[str] = set()
    for key, relation, sql in (
        ("events", "canonical_event", queries.COUNT_EVENTS),
        ("arrivals", "arrival", queries.COUNT_ARRIVALS),
    ):
        guess = estimates.get(relation, -1)
        if guess > queries.EXACT_UP_TO:
            counts[key] = guess
            estimated.add(key)
        else:
            counts[key] = (await queries.fetch(conn, sql))[0]["n"]
    counts.update((await queries.fetch(conn, queries.SUMMARY))[0])
    return counts, estimated


def count_cells(counts: dict[str, Any], estimated: set[str]) -> list[dict[str, Any]]:
    """The overview's counts as the page shows them: `~N` and "(estimate)" for an estimate, a link
    to the page that lists them."""
    return [
        {
            "number": f"~{v:,}" if k in estimated else v,
            "label": k.replace("_", " ") + (" (estimate)" if k in estimated else ""),
            "href": COUNT_LINKS.get(k),
        }
        for k, v in counts.items()
    ]


async def overview(request: web.Request) -> web.StreamResponse:
    fmt = export_format(request)
    async with request.app[POOL].reading() as conn:
        counts, estimated = await totals(conn)
        fleet = fleet_rows(await queries.fetch(conn, queries.FLEET), request.app[SILENT_AFTER])
        retention = await retention_state.read(conn)
    if fmt in ("csv", "json"):
        doc = {"summary": counts, "estimated": sorted(estimated), "fleet": fleet, "retention": retention}
        return export(fleet if fmt == "csv" else [doc], fmt, "overview")
    return render(
        "overview.html",
        counts=count_cells(counts, estimated),
        fleet=fleet,
        silent_after=request.app[SILENT_AFTER],
        retention=retention_state.describe(retention),
    )
