"""Events: search (source, key, gateway, source time), and one event with its arrivals and notifications."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agent.core.timestamps import format_timestamp
from agent.ledger import review
from agent.ledger.web import queries
from agent.ledger.web.common import (
    POOL,
    as_json,
    export,
    export_format,
    int_param,
    listing,
    text_param,
    time_param,
)
from agent.ledger.web.forms import writing
from agent.ledger.web.render import render, url


def event_filters(request: web.Request) -> dict[str, Any]:
    return {
        "source": text_param(request, "source"),
        "transition": text_param(request, "transition"),
        "boot": text_param(request, "boot"),
        "gateway": text_param(request, "gateway"),
        "since": time_param(request, "since"),
        "until": time_param(request, "until"),
        "before": int_param(request, "before"),
        "before_at": time_param(request, "before_at"),
    }


def _shown(f: dict[str, Any]) -> dict[str, Any]:
    """The filters as they go back into links (times as text, paging left out)."""
    return {
        k: (format_timestamp(v) if hasattr(v, "tzinfo") else v)
        for k, v in f.items()
        if v is not None and k not in ("before", "before_at")
    }


def _older(f: dict[str, Any], rows: list[dict[str, Any]], limit: int) -> str | None:
    """The link to the next page (older events) when this one is full."""
    if len(rows) < limit or not rows:
        return None
    last = rows[-1]
    paging = {"before": last.get("arrival_id", last["id"])}
    if f["gateway"]:
        paging["before_at"] = format_timestamp(last["received_at"])
    return url("/events", {**_shown(f), **paging})


async def events(request: web.Request) -> web.StreamResponse:
    f = event_filters(request)
    limit, fmt = listing(request)
    async with request.app[POOL].reading() as conn:
        rows = await queries.fetch(conn, queries.events_sql(f), {**f, "limit": limit})
    if fmt:
        return export(rows, fmt, "events")
    return render("events.html", rows=rows, shown=_shown(f), older=_older(f, rows, limit))


async def event_of(conn: queries.Conn, cid: int) -> dict[str, Any] | None:
    """One canonical event with its arrivals, notifications, conflicting originals and their
    review marks; None when there is no such event."""
    found = await queries.fetch(conn, queries.EVENT, {"id": cid})
    if not found:
        return None
    conflicts = await queries.fetch(conn, queries.EVENT_CONFLICTS, {"id": cid})
    return {
        "ev": found[0],
        "arrivals": await queries.fetch(conn, queries.EVENT_ARRIVALS, {"id": cid}),
        "notifications": await queries.fetch(conn, queries.EVENT_NOTIFICATIONS, {"id": cid}),
        "conflicts": conflicts,
        "marks": await review.marks_of(conn, [c["arrival_id"] for c in conflicts]),
    }


def event_export(found: dict[str, Any], fmt: str) -> web.Response:
    """The event as one JSON object (its payload parsed, with its parts), or its arrivals as CSV."""
    ev = found["ev"]
    if fmt == "csv":
        return export(found["arrivals"], fmt, f"event-{ev['id']}")
    doc = {
        **ev,
        "payload": as_json(ev["payload"]),
        "arrivals": found["arrivals"],
        "notifications": found["notifications"],
        "conflicts": found["conflicts"],
    }
    return export([doc], fmt, f"event-{ev['id']}")


async def event(request: web.Request) -> web.StreamResponse:
    try:
        cid = int(request.match_info["id"])
    except ValueError:
        raise web.HTTPNotFound(text="no such event\n") from None
    fmt = export_format(request)
    async with request.app[POOL].reading() as conn:
        found = await event_of(conn, cid)
    if found is None:
        raise web.HTTPNotFound(text=f"no canonical event {cid}\n")
    if fmt in ("csv", "json"):
        return event_export(found, fmt)
    return render("event.html", **found, w=writing(request))
