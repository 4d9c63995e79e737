"""Who may write, and the headers every answer carries.

Read-only unless a token file is configured. With one, a person signs in once by pasting the
token (POST /login); the answer is a session cookie (HttpOnly, SameSite=Strict) signed with a
key made at start. A write then needs all of: that cookie, the form's CSRF token (derived from
the session by the same key), and an `Origin` (or, lacking it, `Referer`) naming this very
site. Anything less is 403 and nothing is written.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web

COOKIE = "edge_ledger_session"

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class Guard:
    def __init__(self, token: str | None) -> None:
        self.token = token
        self._key = secrets.token_bytes(32)

    @classmethod
    def from_file(cls, token_file: str | None) -> Guard:
        if not token_file:
            return cls(None)
        token = Path(token_file).read_text(encoding="utf-8").strip()
        if not token:
            raise ValueError(f"{token_file}: the token file is empty")
        return cls(token)

    def reread(self, token_file: str | None) -> None:
        """The token from `token_file` again (a reload); a new token ends every session signed
        before it. An unreadable or empty file raises and changes nothing."""
        token = Guard.from_file(token_file).token
        if token != self.token:
            self.token, self._key = token, secrets.token_bytes(32)

    @property
    def writable(self) -> bool:
        return self.token is not None

    def _sign(self, what: str, nonce: str) -> str:
        return hmac.new(self._key, f"{what}:{nonce}".encode(), hashlib.sha256).hexdigest()

    def login(self, offered: str) -> str | None:
        """A new session cookie value when `offered` is the token; else None."""
        if self.token is None or not hmac.compare_digest(offered.strip().encode(), self.token.encode()):
            return None
        nonce = secrets.token_hex(16)
        return f"{nonce}.{self._sign('session', nonce)}"

    def session(self, request: web.Request) -> str | None:
        """The nonce of a valid session cookie, else None."""
        if self.token is None:
            return None
        nonce, _, sig = request.cookies.get(COOKIE, "").partition(".")
        if nonce and hmac.compare_digest(sig, self._sign("session", nonce)):
            return nonce
        return None

    def csrf(self, nonce: str) -> str:
        return self._sign("csrf", nonce)

    def check_write(self, request: web.Request, form_csrf: str) -> None:
        """Raise 403 unless the request is a signed-in, same-origin POST with the right CSRF token."""
        if self.token is None:
            raise web.HTTPForbidden(
                text="read-only: start `ledger web` with a token file to allow marks and retries\n"
            )
        same_origin(request)
        nonce = self.session(request)
        if nonce is None:
            raise web.HTTPForbidden(text="sign in with the token first (/login)\n")
        if not hmac.compare_digest(form_csrf, self.csrf(nonce)):
            raise web.HTTPForbidden(text="the form's CSRF token is missing or wrong; reload the page\n")


def same_origin(request: web.Request) -> None:
    """403 unless Origin (or Referer) is this site: scheme, host and port as the request names them."""
    here = f"{request.scheme}://{request.host}"
    origin = request.headers.get("Origin")
    if origin is None:
        ref = request.headers.get("Referer")
        if ref:
            parts = urlsplit(ref)
            origin = f"{parts.scheme}://{parts.netloc}"
    if origin is None or origin == "null" or origin != here:
        raise web.HTTPForbidden(text="cross-origin or origin-less POST refused\n")


@web.middleware
async def headers_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        resp = await handler(request)
    except web.HTTPException as exc:
        exc.headers.update(HEADERS)
        raise
    resp.headers.update(HEADERS)
    return resp
