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
    int_param,
    listing,
    plain,
    shown,
    text_param,
)
from agent.ledger.web.forms import writing
from agent.ledger.web.render import render, url

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


def comparison(c: dict[str, Any]) -> list[tuple[str, Any, Any, bool]]:
    """A conflict's rows side by side: (field, canonical, conflicting, marked as differing)."""
    canon, other = as_json(c["canonical_payload"]), as_json(c["conflicting_payload"])
    # Marked: what the payload hash covers (the source time and the payload's fields); the
    # gateway and the arrival time are evidence, shown but never part of a conflict.
    return [
        ("gateway", c["canonical_gateway"], c["conflicting_gateway"], False),
        ("arrivalAt", plain(c["canonical_arrival_at"]), plain(c["conflicting_arrival_at"]), False),
        (
            "sourceTimestamp",
            plain(c["canonical_ts"]),
            plain(c["conflicting_ts"]),
            c["canonical_ts"] != c["conflicting_ts"],
        ),
        ("payload hash", c["canonical_hash"], c["conflicting_hash"], True),
        *((f"payload.{name}", _text(a), _text(b), diff) for name, a, b, diff in differing(canon, other)),
    ]


def _filters(request: web.Request) -> dict[str, Any]:
    return {
        "state": text_param(request, "state", choices=STATES),
        "source": text_param(request, "source"),
        "gateway": text_param(request, "gateway"),
        "before": int_param(request, "before"),
    }


def _older(path: str, f: dict[str, Any], rows: list[dict[str, Any]], limit: int) -> str | None:
    if len(rows) < limit or not rows:
        return None
    return url(path, {**shown(f), "before": rows[-1]["arrival_id"]})


async def _review_list(
    request: web.Request,
    path: str,
    sql_of: Callable[[dict[str, Any]], LiteralString],
    shape: Callable[[dict[str, Any]], dict[str, Any]] = dict,
) -> web.StreamResponse:
    """A page of arrivals waiting for a person (conflicts, pending; templates/review_list.html):
    its rows (each made ready for its template by `shape`) with their review marks; or its export
    with the marks."""
    f = _filters(request)
    limit, fmt = listing(request)
    async with request.app[POOL].reading() as conn:
        rows = await queries.fetch(conn, sql_of(f), {**f, "limit": limit})
        marks = await review.marks_of(conn, [r["arrival_id"] for r in rows])
    if fmt:
        return export([{**r, "marks": marks.get(r["arrival_id"], [])} for r in rows], fmt, path[1:])
    return render(
        f"{path[1:]}.html",
        path=path,
        rows=[shape(r) for r in rows],
        marks=marks,
        filters=f,
        states=STATES,
        shown=shown(f),
        older=_older(path, f, rows, limit),
        w=writing(request),
    )


async def conflicts(request: web.Request) -> web.StreamResponse:
    return await _review_list(
        request, "/conflicts", queries.conflicts_sql, lambda r: {**r, "comparison": comparison(r)}
    )


async def pending(request: web.Request) -> web.StreamResponse:
    return await _review_list(request, "/pending", queries.pending_sql)
