"""The two write forms (a review mark, a notification retry) as the pages show them.

Without a session the page offers the sign-in link instead; the server checks everything again
on POST (security.Guard.check_write), so a form shown is never a permission.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agent.ledger.web.common import GUARD
from agent.ledger.web.html import Markup, link, tag, url


def _csrf(request: web.Request) -> str | None:
    guard = request.app[GUARD]
    nonce = guard.session(request)
    return None if nonce is None else guard.csrf(nonce)


def writing(request: web.Request) -> dict[str, Any]:
    """What templates/forms.html needs: the session's CSRF token (None: not signed in), where the
    form goes back to, and whether this page takes writes at all."""
    return {"csrf": _csrf(request), "here": request.path_qs, "writable": request.app[GUARD].writable}


def sign_in_hint(request: web.Request) -> Markup:
    if not request.app[GUARD].writable:
        return tag("p", "Read-only: this review page was started without a token file.", class_="hint")
    return tag(
        "p",
        link(url("/login", {"next": request.path_qs}), "Sign in with the token"),
        " to mark or retry.",
        class_="hint",
    )


def mark_form(request: web.Request, arrival_id: int) -> Markup:
    token = _csrf(request)
    if token is None:
        return sign_in_hint(request)
    return tag(
        "form",
        tag("input", type="hidden", name="csrf", value=token),
        tag("input", type="hidden", name="next", value=request.path_qs),
        tag("label", "Note ", tag("input", type="text", name="note", required="required", size="50")),
        " ",
        tag("label", "By ", tag("input", type="text", name="by", required="required", size="12")),
        " ",
        tag("button", "Mark reviewed", type="submit"),
        method="post",
        action=f"/arrivals/{arrival_id}/mark",
        class_="mark",
    )


def retry_form(request: web.Request, notification_id: int) -> Markup:
    token = _csrf(request)
    if token is None:
        return Markup("")
    return tag(
        "form",
        tag("input", type="hidden", name="csrf", value=token),
        tag("input", type="hidden", name="next", value=request.path_qs),
        tag("button", "Retry", type="submit"),
        method="post",
        action=f"/notifications/{notification_id}/retry",
        class_="retry",
    )
