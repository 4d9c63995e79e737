"""What every command shares: the store context, exit codes, and running a command's coroutine.

Kept apart from `agent.cli.main` so that command modules never import the module that registers
them (that import cycle breaks `python -m agent`).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import click

from agent.config.store import store_settings
from agent.core.errors import ConfigError, StoreError
from agent.store.store import Store

EX_IOERR = 74
EX_CONFIG = 78

T = TypeVar("T")


class Context:
    def __init__(self, db: str | None, config: str, max_db_size: str | None, synchronous: str | None) -> None:
        self.db = db
        self.config = config
        self.max_db_size = max_db_size
        self.synchronous = synchronous

    async def open_store(self) -> Store:
        path, sync, max_bytes = store_settings(
            db=self.db, config_path=self.config, synchronous=self.synchronous, max_size=self.max_db_size
        )
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return await Store.open(path, synchronous=sync, max_bytes=max_bytes)


def run_async(fn: Callable[[], Awaitable[T]]) -> T:
    """Run one command's coroutine and map our errors to exit codes with a clear message."""
    try:
        return asyncio.run(fn())  # type: ignore[arg-type]
    except ConfigError as exc:
        click.echo(f"edge-agent: configuration error: {exc}", err=True)
        sys.exit(EX_CONFIG)
    except StoreError as exc:
        click.echo(f"edge-agent: {exc}", err=True)
        sys.exit(EX_IOERR)
