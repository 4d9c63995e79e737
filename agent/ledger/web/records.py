"""Gaps and boots per controller on a timeline, and the notifications by state."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from agent.ledger.web import queries
from agent.ledger.web.common import (
    POOL,
    export,
    int_param,
    listing,
    shown,
    text_param,
)
from agent.ledger.web.forms import writing
from agent.ledger.web.render import render, url

NOTIFICATION_STATES = ("", "pending", "sent", "dead")
_EPOCH = datetime.min.replace(tzinfo=UTC)


async def notification_counts(conn: queries.Conn) -> dict[str, str]:
    """Rows per state; `sent` is `~N` (an estimate) on a big outbox (see queries.NOTIFICATION_COUNTS)."""
    c = (await queries.fetch(conn, queries.NOTIFICATION_COUNTS))[0]
    if int(c["estimate"]) > queries.EXACT_UP_TO:
        sent = f"~{max(0, int(c['estimate']) - c['pending'] - c['dead']):,}"
    else:
        sent = str((await queries.fetch(conn, queries.COUNT_SENT))[0]["n"])
    return {"pending": str(c["pending"]), "sent": sent, "dead": str(c["dead"])}


def timeline_of(boots: list[dict[str, Any]], anomalies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Boots and anomalies of one controller, newest first."""
    return sorted([*boots, *anomalies], key=lambda r: r["at"] or _EPOCH, reverse=True)


async def timeline(request: web.Request) -> web.StreamResponse:
    device = text_param(request, "device")
    limit, fmt = listing(request)
    async with request.app[POOL].reading() as conn:
        devices = await queries.fetch(conn, queries.DEVICES, {"limit": 500})
        rows: list[dict[str, Any]] = []
        if device:
            params = {"device": device, "prefix": device + "/", "limit": limit}
            rows = timeline_of(
                await queries.fetch(conn, queries.DEVICE_BOOTS, params),
                await queries.fetch(conn, queries.DEVICE_ANOMALIES, params),
            )
    if fmt:
        return export(rows if device else devices, fmt, "timeline")
    return render("timeline.html", device=device, devices=devices, rows=rows)


async def notifications(request: web.Request) -> web.StreamResponse:
    f = {
        "state": text_param(request, "state", choices=NOTIFICATION_STATES),
        "kind": text_param(request, "kind"),
        "before": int_param(request, "before"),
    }
    limit, fmt = listing(request)
    async with request.app[POOL].reading() as conn:
        rows = await queries.fetch(conn, queries.notifications_sql(f), {**f, "limit": limit})
        counts = await notification_counts(conn)
    if fmt:
        return export(rows, fmt, "notifications")
    older = None
    if len(rows) == limit and rows:
        older = url("/notifications", {**shown(f), "before": rows[-1]["id"]})
    return render(
        "notifications.html",
        rows=rows,
        counts=counts,
        filters=f,
        states=NOTIFICATION_STATES,
        shown=shown(f),
        older=older,
        w=writing(request),
    )
