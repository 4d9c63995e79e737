"""Conflicts (both originals side by side, differing fields marked) and pending arrivals (raw evidence)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, LiteralString

from aiohttp import web

from agent.ledger import review
from agent.ledger.web import queries
from agent.ledger.web.common import (
    POOL,
    as_json,
    export,
    html_response,
    int_param,
    listing,
    plain,
    shown,
    text_param,
)
from agent.ledger.web.forms import mark_form
from agent.ledger.web.html import Markup, esc, exports, filter_form, link, page, pre, tag, url

STATES = ("", "open", "reviewed")


def _text(v: Any) -> str:
    return "(absent)" if v is _ABSENT else json.dumps(v, ensure_ascii=False, sort_keys=True)


_ABSENT = object()


def differing(left: Any, right: Any) -> list[tuple[str, Any, Any, bool]]:
    """(field, left, right, differs) over the union of two payloads' top-level fields."""
    if not isinstance(left, dict) or not isinstance(right, dict):
        return [("payload", left, right, left != right)]
    out = []
    for k in sorted(set(left) | set(right)):
        a, b = left.get(k, _ABSENT), right.get(k, _ABSENT)
        out.append((k, a, b, a != b))
    return out


def side_by_side(c: dict[str, Any]) -> Markup:
    canon, other = as_json(c["canonical_payload"]), as_json(c["conflicting_payload"])
    # Marked: what the payload hash covers (the source time and the payload's fields); the
    # gateway and the arrival time are evidence, shown but never part of a conflict.
    rows = [
        ("gateway", c["canonical_gateway"], c["conflicting_gateway"], False),
        ("arrivalAt", plain(c["canonical_arrival_at"]), plain(c["conflicting_arrival_at"]), False),
        (
            "sourceTimestamp",
            plain(c["canonical_ts"]),
            plain(c["conflicting_ts"]),
            c["canonical_ts"] != c["conflicting_ts"],
        ),
        ("payload hash", c["canonical_hash"], c["conflicting_hash"], True),
    ]
    trs = [
        tag(
            "tr",
            tag("th", "field"),
            tag("th", f"canonical (event {c['canonical_id']})"),
            tag("th", f"conflicting (arrival {c['arrival_id']})"),
        )
    ]
    for name, a, b, diff in rows:
        trs.append(tag("tr", tag("td", name), tag("td", a), tag("td", b), class_="differs" if diff else None))
    for name, a, b, diff in differing(canon, other):
        trs.append(
            tag(
                "tr",
                tag("td", f"payload.{name}"),
                tag("td", _text(a)),
                tag("td", _text(b)),
                class_="differs" if diff else None,
            )
        )
    return tag("table", *trs, class_="sbs")


def _filters(request: web.Request) -> dict[str, Any]:
    return {
        "state": text_param(request, "state", choices=STATES),
        "source": text_param(request, "source"),
        "gateway": text_param(request, "gateway"),
        "before": int_param(request, "before"),
    }


def _marks(ms: list[dict[str, Any]]) -> list[Markup]:
    if not ms:
        return [tag("p", "not reviewed yet", class_="open")]
    return [
        tag("p", f"reviewed {m['marked_at']} by {m['marked_by'] or '-'}: ", esc(m["note"]), class_="markline")
        for m in ms
    ]


def _more(path: str, f: dict[str, Any], rows: list[dict[str, Any]], limit: int) -> Markup | None:
    if len(rows) < limit or not rows:
        return None
    return tag("p", link(url(path, {**shown(f), "before": rows[-1]["arrival_id"]}), "older"), class_="more")


async def _review_list(
    request: web.Request,
    path: str,
    title: str,
    sql_of: Callable[[dict[str, Any]], LiteralString],
    intro: list[Markup],
    empty: str,
    entry: Callable[[dict[str, Any]], list[Markup]],
) -> web.StreamResponse:
    """A page of arrivals waiting for a person (conflicts, pending): the filters, each arrival's
    `entry` with its review marks and the form to mark it, paging; or its export with the marks."""
    f = _filters(request)
    limit, fmt = listing(request)
    async with request.app[POOL].reading() as conn:
        rows = await queries.fetch(conn, sql_of(f), {**f, "limit": limit})
        marks = await review.marks_of(conn, [r["arrival_id"] for r in rows])
    if fmt:
        return export([{**r, "marks": marks.get(r["arrival_id"], [])} for r in rows], fmt, path[1:])
    parts: list[Any] = [
        *intro,
        filter_form(
            path,
            [
                ("state", "state", f["state"]),
                ("source", "source", f["source"]),
                ("gateway", "gateway", f["gateway"]),
            ],
            {"state": STATES},
        ),
    ]
    if not rows:
        parts.append(tag("p", empty, class_="empty"))
    for r in rows:
        parts += [*entry(r), *_marks(marks.get(r["arrival_id"], [])), mark_form(request, r["arrival_id"])]
    parts += [_more(path, f, rows, limit), exports(path, shown(f))]
    return html_response(page(title, *parts, active=path))


def _conflict(r: dict[str, Any]) -> list[Markup]:
    return [
        tag(
            "h2",
            link(f"/events/{r['canonical_id']}", f"{r['source']}  {r['transition_id']} / {r['boot_id']}"),
            id=f"a{r['arrival_id']}",
        ),
        side_by_side(r),
    ]


def _pending(r: dict[str, Any]) -> list[Markup]:
    where = f"line {r['line']} of " if r["line"] is not None else ""
    return [
        tag("h2", f"Arrival {r['arrival_id']}", id=f"a{r['arrival_id']}"),
        tag(
            "p",
            "from ",
            link(url("/pending", {"gateway": r["gateway"]}), r["gateway"]),
            f" ({where}{r['via']}), arrivalAt ",
            esc(r["gateway_arrival_at"]),
            "; source ",
            esc(r["source"]),
            ", transitionId ",
            esc(r["transition_id"]),
            ", bootId ",
            esc(r["boot_id"]),
        ),
        tag("p", tag("strong", "Why: "), esc(r["reason"])),
        tag("p", tag("strong", "Raw evidence, as it arrived:")),
        pre(bytes(r["raw"]).decode("utf-8", "backslashreplace")),
    ]


async def conflicts(request: web.Request) -> web.StreamResponse:
    return await _review_list(
        request,
        "/conflicts",
        "Conflicts",
        queries.conflicts_sql,
        [],
        "No conflicts with these filters.",
        _conflict,
    )


async def pending(request: web.Request) -> web.StreamResponse:
    hint = tag(
        "p",
        "Identity-incomplete arrivals: kept, never merged, no boot id made up for them."
        " They wait for a person.",
        class_="hint",
    )
    return await _review_list(
        request,
        "/pending",
        "Pending",
        queries.pending_sql,
        [hint],
        "Nothing pending with these filters.",
        _pending,
    )
