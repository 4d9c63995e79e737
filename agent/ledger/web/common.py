"""What every page shares: its query-string filters (validated), its CSV/JSON export, its pool."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from agent.core.spreadsheet import safe_row
from agent.core.timestamps import format_timestamp
from agent.ledger.web.pool import Pool
from agent.ledger.web.security import Guard

POOL: web.AppKey[Pool] = web.AppKey("pool", Pool)
GUARD: web.AppKey[Guard] = web.AppKey("guard", Guard)
SILENT_AFTER: web.AppKey[float] = web.AppKey("silent_after", float)
LIMIT_PAGE = 50
LIMIT_MAX_PAGE = 500
LIMIT_MAX_EXPORT = 10_000


def bad(text: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=text + "\n")


def text_param(req: web.Request, name: str, *, choices: Sequence[str] | None = None) -> str | None:
    value = req.query.get(name, "").strip()
    if not value:
        return None
    if choices is not None and value not in choices:
        raise bad(f"{name} must be one of {', '.join(choices)}")
    if len(value) > 1000:
        raise bad(f"{name} is too long")
    return value


def int_param(req: web.Request, name: str) -> int | None:
    value = req.query.get(name, "").strip()
    if not value:
        return None
    try:
        n = int(value)
    except ValueError:
        raise bad(f"{name} must be a whole number") from None
    if not 0 < n < 2**63:
        raise bad(f"{name} is out of range")
    return n


def time_param(req: web.Request, name: str) -> datetime | None:
    value = req.query.get(name, "").strip()
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise bad(f"{name} must be a time such as 2026-04-22T08:00:00Z") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def export_format(req: web.Request) -> str | None:
    return text_param(req, "format", choices=("html", "csv", "json"))


def limit_of(req: web.Request) -> int:
    fmt = export_format(req)
    n = int_param(req, "limit") or LIMIT_PAGE
    return min(n, LIMIT_MAX_EXPORT if fmt in ("csv", "json") else LIMIT_MAX_PAGE)


def listing(req: web.Request) -> tuple[int, str | None]:
    """A list page's opening: how many rows, and `csv` or `json` when it is asked for as an export
    (None: the HTML page)."""
    limit = limit_of(req)
    fmt = export_format(req)
    return limit, fmt if fmt in ("csv", "json") else None


def shown(filters: Mapping[str, Any]) -> dict[str, Any]:
    """The filters that are set, as they go back into links (the paging `before` left out)."""
    return {k: v for k, v in filters.items() if k != "before" and v}


def plain(value: Any) -> Any:
    """A database value as JSON holds it."""
    if isinstance(value, datetime):
        return format_timestamp(value)
    if isinstance(value, bytes | memoryview):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, float | int | str | bool) or value is None:
        return value
    return str(value)  # Decimal and the like


def export(rows: Sequence[Mapping[str, Any]], fmt: str, name: str) -> web.Response:
    """The rows of a page as CSV (one row each, nested values as JSON text; a text cell that would
    start a formula in a spreadsheet gets a leading `'`) or a JSON array (exact)."""
    clean = [{k: plain(v) for k, v in r.items()} for r in rows]
    if fmt == "json":
        body = json.dumps(clean, ensure_ascii=False, indent=1)
        return web.Response(
            text=body,
            content_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="{name}.json"'},
        )
    out = io.StringIO()
    w = csv.writer(out)
    cols = list(clean[0].keys()) if clean else []
    w.writerow(cols)
    for r in clean:
        w.writerow(
            safe_row(
                [
                    json.dumps(r[c], ensure_ascii=False) if isinstance(r[c], dict | list) else r[c]
                    for c in cols
                ]
            )
        )
    return web.Response(
        text=out.getvalue(),
        content_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}.csv"'},
    )


def as_json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text
