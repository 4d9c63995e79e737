"""Gaps and boots per controller on a timeline, and the notifications by state."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from agent.ledger.web import queries
from agent.ledger.web.common import (
    POOL,
    as_json,
    export,
    html_response,
    int_param,
    listing,
    shown,
    text_param,
)
from agent.ledger.web.forms import retry_form, sign_in_hint
from agent.ledger.web.html import Markup, esc, exports, filter_form, link, page, pre, table, tag, url

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


def _what(r: dict[str, Any]) -> Markup:
    if r["what"] == "boot":
        live = "live" if r["live"] else "seen late"
        return tag(
            "span", f"boot {r['boot_id']} ({live}), after {r['previous_boot_id'] or '-'}", class_="boot"
        )
    return tag(
        "span", f"{r['kind']} {r['from_value']} -> {r['to_value']} (boot {r['boot_id']})", class_=r["kind"]
    )


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
    dev_rows = [
        [link(url("/timeline", {"device": d["device"]}), d["device"]), d["boots"], d["last_boot"]]
        for d in devices
    ]
    parts: list[Any] = [
        filter_form("/timeline", [("device", "controller (site/device)", device)]),
        table(["controller", "boots", "last boot seen"], dev_rows),
    ]
    if device:
        parts += [
            tag("h2", f"Timeline of {device}"),
            tag(
                "ol",
                *(
                    tag(
                        "li",
                        tag("time", r["at"]),
                        " ",
                        _what(r),
                        " ",
                        tag("span", r["source"], class_="src"),
                        pre(as_json(r["evidence"])),
                        class_=r["what"],
                    )
                    for r in rows
                ),
                class_="timeline",
            )
            if rows
            else tag("p", "No boots, gaps or overruns recorded for this controller.", class_="empty"),
        ]
    parts.append(exports("/timeline", {"device": device}))
    return html_response(page("Gaps and boots", *parts, active="/timeline"))


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
    links = shown(f)
    by_state = tag(
        "p",
        *(
            Markup(f"{link(url('/notifications', {'state': state}), state)}: {esc(n)} &nbsp; ")
            for state, n in counts.items()
        ),
        class_="states",
    )
    body_rows = []
    for n in rows:
        error = pre(n["last_error"]) if n["state"] == "dead" and n["last_error"] else n["last_error"]
        body_rows.append(
            [
                n["id"],
                link(f"/events/{n['canonical_id']}", n["canonical_id"]),
                n["kind"],
                tag("span", n["state"], class_=n["state"]),
                f"{n['attempts']}/{n['max_attempts']}",
                n["sent_at"] or n["visible_at"],
                error,
                retry_form(request, n["id"]) if n["state"] == "dead" else "",
            ]
        )
    more = None
    if len(rows) == limit and rows:
        more = tag(
            "p", link(url("/notifications", {**links, "before": rows[-1]["id"]}), "older"), class_="more"
        )
    parts = [
        by_state,
        filter_form(
            "/notifications",
            [("state", "state", f["state"]), ("kind", "kind", f["kind"])],
            {"state": NOTIFICATION_STATES},
        ),
        table(["id", "event", "kind", "state", "attempts", "sent / due", "last error", ""], body_rows),
        more,
        sign_in_hint(request)
        if any(n["state"] == "dead" for n in rows) and not _signed_in(request)
        else None,
        exports("/notifications", links),
    ]
    return html_response(page("Notifications", *parts, active="/notifications"))


def _signed_in(request: web.Request) -> bool:
    from agent.ledger.web.common import GUARD

    return request.app[GUARD].session(request) is not None
