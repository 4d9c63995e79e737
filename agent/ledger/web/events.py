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
    html_response,
    int_param,
    listing,
    text_param,
    time_param,
)
from agent.ledger.web.forms import mark_form
from agent.ledger.web.html import esc, exports, filter_form, link, page, pre, table, tag, url


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


async def events(request: web.Request) -> web.StreamResponse:
    f = event_filters(request)
    limit, fmt = listing(request)
    async with request.app[POOL].reading() as conn:
        rows = await queries.fetch(conn, queries.events_sql(f), {**f, "limit": limit})
    if fmt:
        return export(rows, fmt, "events")
    shown = _shown(f)
    body_rows = [
        [
            link(f"/events/{r['id']}", r["id"]),
            link(url("/events", {"source": r["source"]}), r["source"]),
            r["transition_id"],
            r["boot_id"],
            r["source_ts"],
            r["arrivals"],
            tag("span", "conflict", class_="conflict") if r["conflicted"] else "",
            link(url("/events", {"gateway": r["first_gateway"]}), r["first_gateway"]),
        ]
        for r in rows
    ]
    more = None
    if len(rows) == limit and rows:
        last = rows[-1]
        paging = {"before": last.get("arrival_id", last["id"])}
        if f["gateway"]:
            paging["before_at"] = format_timestamp(last["received_at"])
        more = tag("p", link(url("/events", {**shown, **paging}), "older events"), class_="more")
    fields = [
        ("source", "source", shown.get("source")),
        ("transition", "transitionId", shown.get("transition")),
        ("boot", "bootId", shown.get("boot")),
        ("gateway", "gateway", shown.get("gateway")),
        ("since", "source time from", shown.get("since")),
        ("until", "to", shown.get("until")),
    ]
    body = page(
        "Events",
        filter_form("/events", fields),
        table(
            ["id", "source", "transitionId", "bootId", "source time", "arrivals", "", "first gateway"],
            body_rows,
        ),
        more,
        exports("/events", shown),
        active="/events",
    )
    return html_response(body)


async def event(request: web.Request) -> web.StreamResponse:
    try:
        cid = int(request.match_info["id"])
    except ValueError:
        raise web.HTTPNotFound(text="no such event\n") from None
    fmt = export_format(request)
    async with request.app[POOL].reading() as conn:
        found = await queries.fetch(conn, queries.EVENT, {"id": cid})
        if not found:
            raise web.HTTPNotFound(text=f"no canonical event {cid}\n")
        ev = found[0]
        arrivals = await queries.fetch(conn, queries.EVENT_ARRIVALS, {"id": cid})
        notes = await queries.fetch(conn, queries.EVENT_NOTIFICATIONS, {"id": cid})
        conflicts = await queries.fetch(conn, queries.EVENT_CONFLICTS, {"id": cid})
        marks = await review.marks_of(conn, [c["arrival_id"] for c in conflicts])
    if fmt in ("csv", "json"):
        doc = {
            **ev,
            "payload": as_json(ev["payload"]),
            "arrivals": arrivals,
            "notifications": notes,
            "conflicts": conflicts,
        }
        return export([doc] if fmt == "json" else arrivals, fmt, f"event-{cid}")
    facts = table(
        [
            "source",
            "transitionId",
            "bootId",
            "source time",
            "first gateway",
            "inserted arrivalAt",
            "payload hash",
        ],
        [
            [
                ev["source"],
                ev["transition_id"],
                ev["boot_id"],
                ev["source_ts"],
                ev["first_gateway"],
                ev["inserted_arrival_at"],
                ev["payload_hash"],
            ]
        ],
    )
    arr_rows = [
        [
            a["id"],
            tag("span", a["decision"], class_=a["decision"]),
            link(url("/events", {"gateway": a["gateway"]}), a["gateway"]),
            a["via"],
            a["attempt"],
            a["replayed"],
            a["gateway_arrival_at"],
            a["received_at"],
            a["reason"],
        ]
        for a in arrivals
    ]
    note_rows = [
        [
            link(url("/notifications", {"kind": n["kind"]}), n["kind"]),
            n["state"],
            f"{n['attempts']}/{n['max_attempts']}",
            n["sent_at"],
            n["last_error"],
            n["idempotency_key"],
        ]
        for n in notes
    ]
    conflict_parts = []
    for c in conflicts:
        conflict_parts += [
            tag("h3", f"Conflicting original (arrival {c['arrival_id']})"),
            pre(as_json(c["payload"])),
            tag("p", link(url("/conflicts", {"source": ev["source"]}), "side by side on the conflicts page")),
            *[
                tag(
                    "p",
                    f"reviewed {m['marked_at']} by {m['marked_by'] or '-'}: ",
                    esc(m["note"]),
                    class_="markline",
                )
                for m in marks.get(c["arrival_id"], [])
            ],
            mark_form(request, c["arrival_id"]),
        ]
    body = page(
        f"Event {cid}",
        facts,
        tag("h2", "Payload"),
        pre(as_json(ev["payload"])),
        tag("h2", f"Arrivals ({len(arrivals)})"),
        table(
            [
                "arrival",
                "decision",
                "gateway",
                "via",
                "attempt",
                "replayed",
                "gateway arrivalAt",
                "received",
                "reason",
            ],
            arr_rows,
        ),
        tag("h2", "Notifications"),
        table(["kind", "state", "attempts", "sent", "last error", "idempotency key"], note_rows),
        *conflict_parts,
        exports(f"/events/{cid}", {}),
        active="/events",
    )
    return html_response(body)
