"""A webhook target for the notifier's tests (not a test module): every request recorded, on
127.0.0.1, as the `receiver` fixture of tests/ledger/conftest.py serves it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Receiver:
    """A webhook target on 127.0.0.1 that records every request."""

    port: int = 0
    got: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    on_request: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/notify"

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.got.append({"headers": dict(request.headers), "body": body})
        if self.on_request is not None:
            self.on_request(body)
        return web.Response(status=self.status)

    @property
    def keys(self) -> Counter[str]:
        """Requests per Idempotency-Key."""
        return Counter(g["headers"]["Idempotency-Key"] for g in self.got)
