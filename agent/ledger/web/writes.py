"""The only writes: sign in, an appended review mark, the retry of a dead notification.

Each POST is checked by `Guard.check_write` (session, CSRF token, same origin) before anything
is read from the form's values; the write itself is the code of `ledger review mark` and
`ledger notifications retry`.
"""

from __future__ import annotations

from aiohttp import web

from agent.core.review_mark import NotReviewable
from agent.ledger import notifications, review
from agent.ledger.web.common import GUARD, POOL
from agent.ledger.web.render import render, url
from agent.ledger.web.security import COOKIE, same_origin

RETRY_ATTEMPTS = 5  # the command's default


def _next(value: str | None) -> str:
    """Only a path of this site (never `//host` or a scheme) is a place to go back to."""
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/"


def _id(request: web.Request) -> int:
    try:
        return int(request.match_info["id"])
    except ValueError:
        raise web.HTTPNotFound() from None


async def login_form(request: web.Request) -> web.StreamResponse:
    return render("login.html", writable=request.app[GUARD].writable, next=_next(request.query.get("next")))


async def login(request: web.Request) -> web.StreamResponse:
    guard = request.app[GUARD]
    if not guard.writable:
        raise web.HTTPForbidden(text="read-only\n")
    same_origin(request)
    form = await request.post()
    cookie = guard.login(str(form.get("token", "")))
    if cookie is None:
        raise web.HTTPForbidden(text="wrong token\n")
    resp = web.HTTPSeeOther(_next(str(form.get("next", ""))))
    resp.set_cookie(COOKIE, cookie, httponly=True, samesite="Strict", path="/", secure=request.secure)
    raise resp


async def mark(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    request.app[GUARD].check_write(request, str(form.get("csrf", "")))
    arrival_id = _id(request)
    note = str(form.get("note", ""))
    by = str(form.get("by", "")).strip()
    if not by:
        raise web.HTTPBadRequest(text="say who you are (the form's `by`)\n")
    async with request.app[POOL].connection() as conn:
        try:
            await review.mark(conn, arrival_id, note, by)
        except review.EmptyNote as exc:
            raise web.HTTPBadRequest(text=f"{exc}\n") from exc
        except NotReviewable as exc:
            raise web.HTTPNotFound(text=f"{exc}\n") from exc
    raise web.HTTPSeeOther(_next(str(form.get("next", ""))) + f"#a{arrival_id}")


async def retry(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    request.app[GUARD].check_write(request, str(form.get("csrf", "")))
    nid = _id(request)
    async with request.app[POOL].connection() as conn:
        n = await notifications.retry_dead(conn, ids=[nid], more_attempts=RETRY_ATTEMPTS)
    if n == 0:
        raise web.HTTPConflict(text=f"notification {nid} is not dead (nothing retried)\n")
    raise web.HTTPSeeOther(_next(str(form.get("next", "")) or url("/notifications", {"state": "dead"})))
