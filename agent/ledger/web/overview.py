"""The overview: the counts, and the fleet (each (site, gateway)'s last arrival and last status)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agent.ledger import retention_state
from agent.ledger.web import queries
from agent.ledger.web.common import POOL, SILENT_AFTER, export, export_format, html_response
from agent.ledger.web.html import Markup, esc, exports, link, page, table, tag, url

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


async def overview(request: web.Request) -> web.StreamResponse:
    fmt = export_format(request)
    async with request.app[POOL].reading() as conn:
        counts, estimated = await totals(conn)
        fleet = fleet_rows(await queries.fetch(conn, queries.FLEET), request.app[SILENT_AFTER])
        retention = await retention_state.read(conn)
    if fmt in ("csv", "json"):
        doc = {"summary": counts, "estimated": sorted(estimated), "fleet": fleet, "retention": retention}
        return export(fleet if fmt == "csv" else [doc], fmt, "overview")
    cells = []
    for k, v in counts.items():
        shown = f"~{v:,}" if k in estimated else v
        label = k.replace("_", " ") + (" (estimate)" if k in estimated else "")
        number = link(COUNT_LINKS[k], shown) if k in COUNT_LINKS else shown
        cells.append(tag("div", tag("span", number, class_="n"), tag("span", label), class_="count"))
    rows = []
    for g in fleet:
        if g["state"] == "offline":
            mark = tag(
                "span", "OFFLINE", class_="silent", title="its connection ended without a stop (MQTT Will)"
            )
        elif g["state"] == "stopped":
            mark = tag("span", "STOPPED", class_="silent", title="its last status record: a clean stop")
        elif g["silent"]:
            mark = tag("span", "SILENT", class_="silent")
        else:
            mark = tag("span", "ok", class_="ok")
        silence = "-" if g["silent_s"] is None else f"{g['silent_s']:.0f} s ago"
        if g["clock_ahead_s"] is not None:
            silence += f" (its clock {g['clock_ahead_s']:.0f} s ahead)"
        room = g["store_room_bytes"]
        rows.append(
            [
                "-" if g["site"] is None else g["site"],
                link(url("/events", {"gateway": g["gateway"]}), g["gateway"]),
                mark,
                silence,
                g["last_arrival"],
                g["status_heard_at"],
                g["agent_version"],
                Markup("<br>".join(esc(x) for x in g["upstreams"])) if g["upstreams"] else None,
                None if room is None else f"{int(room) / 1e6:.1f} MB",
            ]
        )
    body = page(
        "Overview",
        tag("div", *cells, class_="counts"),
        tag("h2", "Fleet"),
        tag(
            "p",
            "Each gateway is a site and a gateway name (two sites' gw-1 are two rows; site - when an "
            "arrival does not say it: an import line, a rejected one). "
            f"A gateway is marked SILENT when neither an arrival nor a status record came from it for "
            f"{request.app[SILENT_AFTER]:.0f} s; OFFLINE when its connection to the broker ended without "
            "a stop (its MQTT Will: a crash, a power cut, the network); STOPPED after a clean stop.",
            class_="hint",
        ),
        table(
            [
                "site",
                "gateway",
                "state",
                "last heard",
                "last arrival",
                "last status",
                "version",
                "backlog per upstream",
                "store room",
            ],
            rows,
        ),
        tag("h2", "Retention"),
        tag("pre", "\n".join(retention_state.describe(retention))),
        exports("/", {}),
        active="/",
    )
    return html_response(body)
