"""HTML building with escaping by default: every value is escaped unless it is `Markup`.

A PLC string can hold `<script>`: nothing from the database reaches the page without `esc`.
The pages carry no script at all and no inline style (the CSP forbids both); the style sheet is
`/static/style.css`.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from agent.core.timestamps import format_timestamp
from agent.core.visible import visible


class Markup(str):
    """Text that is already HTML (built here from escaped parts)."""

    __slots__ = ()


def esc(value: Any) -> Markup:
    if isinstance(value, Markup):
        return value
    if value is None:
        return Markup('<span class="none">-</span>')
    if isinstance(value, datetime):
        value = format_timestamp(value)
    elif isinstance(value, bool):
        value = "yes" if value else "no"
    # Control and format characters (a bidirectional override would show "evil" as "live") are
    # shown as escapes, as the command line shows them; newlines stay (HTML white space, <pre> lines).
    return Markup(html.escape(visible(str(value), keep="\n"), quote=True))


def join(parts: Iterable[Any], sep: str = "") -> Markup:
    """Escaped parts; None is left out (a cell shows None as "-": `table` escapes cells itself)."""
    return Markup(sep.join(esc(p) for p in parts if p is not None))


def tag(name: str, /, *children: Any, **attrs: Any) -> Markup:
    """`<name attrs>children</name>`; attribute names take `_` for `-` and a trailing `_` is dropped."""
    text = "".join(
        f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"'
        for k, v in attrs.items()
        if v is not None and v is not False
    )
    if name in _VOID:
        return Markup(f"<{name}{text}>")
    return Markup(f"<{name}{text}>{join(children)}</{name}>")


_VOID = frozenset({"input", "meta", "link", "br", "hr"})


def url(path: str, params: Mapping[str, Any] | None = None) -> str:
    q = {k: str(v) for k, v in (params or {}).items() if v not in (None, "")}
    return path + ("?" + urlencode(q) if q else "")


def link(href: str, text: Any, **attrs: Any) -> Markup:
    return tag("a", text, href=href, **attrs)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, cls: str | None = None) -> Markup:
    head = tag("tr", *(tag("th", h) for h in headers))
    body = [tag("tr", *(tag("td", esc(c)) for c in row)) for row in rows]
    if not body:
        body = [tag("tr", tag("td", "nothing here", colspan=len(headers), class_="empty"))]
    return tag("table", tag("thead", head), tag("tbody", *body), class_=cls)


def pre(value: Any) -> Markup:
    """A JSON value (or raw text) in a <pre>, escaped."""
    text = (
        value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    )
    return tag("pre", text)


NAV = (
    ("/", "Overview"),
    ("/events", "Events"),
    ("/conflicts", "Conflicts"),
    ("/pending", "Pending"),
    ("/timeline", "Gaps and boots"),
    ("/notifications", "Notifications"),
)


def page(title: str, *body: Any, active: str = "/") -> str:
    nav = tag(
        "nav",
        *(link(href, text, class_="active" if href == active else None) for href, text in NAV),
    )
    return "<!doctype html>\n" + tag(
        "html",
        tag(
            "head",
            Markup('<meta charset="utf-8">'),
            Markup('<meta name="viewport" content="width=device-width, initial-scale=1">'),
            tag("title", f"{title} - edge-agent ledger"),
            Markup('<link rel="stylesheet" href="/static/style.css">'),
        ),
        tag(
            "body",
            tag("header", tag("span", "edge-agent ledger", class_="brand"), nav),
            tag("main", tag("h1", title), *body),
        ),
        lang="en",
    )


def exports(path: str, params: Mapping[str, Any]) -> Markup:
    """Links to this page's rows as CSV and JSON, with the same filters."""
    return tag(
        "p",
        "Export: ",
        link(url(path, {**params, "format": "csv"}), "CSV"),
        " ",
        link(url(path, {**params, "format": "json"}), "JSON"),
        class_="exports",
    )


def filter_form(
    path: str, fields: Sequence[tuple[str, str, Any]], choices: Mapping[str, Sequence[str]] | None = None
) -> Markup:
    """A GET form: (name, label, current value); a name in `choices` is a select."""
    inputs = []
    for name, label, value in fields:
        if choices and name in choices:
            opts = [
                tag("option", o or "any", value=o, selected="selected" if (value or "") == o else None)
                for o in choices[name]
            ]
            control = tag("select", *opts, name=name)
        else:
            control = tag("input", name=name, value=value or "", type="text")
        inputs.append(tag("label", label, " ", control))
    return tag(
        "form", *inputs, tag("button", "Filter", type="submit"), method="get", action=path, class_="filters"
    )
