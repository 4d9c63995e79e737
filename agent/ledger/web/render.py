"""Pages as templates: one Jinja2 environment (autoescape, StrictUndefined) and `render`.

A PLC string can hold `<script>`: every `{{ value }}` passes through `shown` (Jinja's `finalize`),
which escapes it for HTML and writes its control and format characters as visible escapes (a
bidirectional override would show "evil" as "live"); autoescape stays on behind it, so a value
that slipped past `shown` would still be escaped. Only `Markup` (text that is already HTML, made
by a template) passes as it is. The pages carry no script and no inline style (the CSP forbids
both); the style sheet is `/static/style.css`.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from agent.core.timestamps import format_timestamp
from agent.core.visible import visible
from agent.ledger.web.common import as_json, plain

NAV = (
    ("/", "Overview"),
    ("/events", "Events"),
    ("/conflicts", "Conflicts"),
    ("/pending", "Pending"),
    ("/timeline", "Gaps and boots"),
    ("/notifications", "Notifications"),
)


NOTHING = Markup('<span class="none">-</span>')  # a value that is not there (SQL NULL)


def shown(value: Any) -> Markup:
    """A value as the page shows it: None as `-`, a time in the ledger's format, a flag as yes/no,
    text escaped with its invisible characters made visible (newlines kept: HTML white space, or
    the lines of a <pre>)."""
    if hasattr(value, "__html__"):
        return Markup(value)
    if value is None:
        return NOTHING
    if isinstance(value, datetime):
        value = format_timestamp(value)
    elif isinstance(value, bool):
        value = "yes" if value else "no"
    return Markup(html.escape(visible(str(value), keep="\n"), quote=True))


def url(path: str, params: Mapping[str, Any] | None = None) -> str:
    """`path?k=v...` with the parameters that are set (the template escapes the `&`)."""
    q = {k: str(v) for k, v in (params or {}).items() if v not in (None, "")}
    return path + ("?" + urlencode(q) if q else "")


def pretty(value: Any) -> str:
    """A JSON value as indented text (raw text stays as it is), for a <pre>."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


ENV = Environment(
    loader=PackageLoader("agent.ledger.web", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    finalize=shown,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters["pretty"] = pretty
ENV.filters["plain"] = plain  # raw evidence (bytes) as text, undecodable bytes as \x escapes
ENV.filters["parsed"] = as_json  # JSON text as its value (text that is not JSON stays text)
ENV.globals.update(url=url, NAV=NAV, NOTHING=NOTHING)  # `{{ none }}` is folded to "None" at compile time


def render_text(name: str, /, **context: Any) -> str:
    """The page `templates/<name>` with `context`."""
    return ENV.get_template(name).render(**context) + "\n"


def render(name: str, /, **context: Any) -> web.Response:
    """The page `templates/<name>` with `context`, as an HTML response."""
    return web.Response(text=render_text(name, **context), content_type="text/html", charset="utf-8")
