"""What `ledger run` serves beside its intakes when the config asks: the Prometheus endpoint
(`metrics:`) and the review page (`web:`), each on its own listener and its own connections."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from agent.ledger.config import LedgerConfig

log = logging.getLogger(__name__)


def side_servers(
    config: LedgerConfig,
    dsn: str | None,
    password: str | None,
    stop: asyncio.Event,
    reloads: list[Callable[[LedgerConfig], None]] | None = None,
    reported: list[Callable[[str, str], None]] | None = None,
) -> Iterator[tuple[str, Coroutine[Any, Any, None]]]:
    """The servers `config` asks for; `reloads` gets what a reload must redo (the page's token),
    `reported` what it must tell (the metrics of the configuration in force)."""
    if config.metrics is None and config.web is None:
        return  # neither: the web modules (aiohttp, the review page) are never imported
    from agent.ledger import metrics
    from agent.ledger.web.app import make_app, serve
    from agent.ledger.web.pool import Pool
    from agent.ledger.web.security import Guard

    if config.metrics is not None:
        from agent.ledger.reload import file_hash

        metrics.config_loaded(file_hash(config.file), None)
        if reported is not None:
            reported.append(metrics.config_loaded)
        m = config.metrics
        app = metrics.make_app(Pool(dsn, size=1, password=password))
        yield (
            "metrics",
            serve(app, m.host, m.port, stop=stop, ready=lambda p: _said("metrics", m.host, p, "/metrics")),
        )
    if config.web is not None:
        w = config.web
        guard = Guard.from_file(w.token_file)
        page = make_app(Pool(dsn, size=4, password=password), guard, silent_after=w.silent_after_s)
        if reloads is not None:
            reloads.append(lambda new: guard.reread(new.web.token_file if new.web is not None else None))
        yield (
            "web",
            serve(page, w.host, w.port, stop=stop, ready=lambda p: _said("review page", w.host, p, "/")),
        )


def _said(what: str, host: str, port: int, path: str) -> None:
    log.info("%s on http://%s:%d%s", what, host, port, path)
