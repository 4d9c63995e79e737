"""What the two write forms (a review mark, a notification retry; templates/forms.html) need.

Without a session the page offers the sign-in link instead; the server checks everything again
on POST (security.Guard.check_write), so a form shown is never a permission.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agent.ledger.web.common import GUARD


def _csrf(request: web.Request) -> str | None:
    guard = request.app[GUARD]
    nonce = guard.session(request)
    return None if nonce is None else guard.csrf(nonce)


def writing(request: web.Request) -> dict[str, Any]:
    """The session's CSRF token (None: not signed in), where a form goes back to (this page), and
    whether this page takes writes at all."""
    return {"csrf": _csrf(request), "here": request.path_qs, "writable": request.app[GUARD].writable}
