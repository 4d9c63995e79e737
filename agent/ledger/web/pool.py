"""A few PostgreSQL connections shared by the page handlers (no extra dependency).

Reading connections are in autocommit with `default_transaction_read_only` on for their session:
every statement is its own read-only transaction (no BEGIN/ROLLBACK round trips per page), and a
GET can never write, even through a mistake in a query. The two writes (a review mark, a
notification retry) borrow the one writing connection, whose code commits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from agent.ledger.connection import connect

Conn = psycopg.AsyncConnection[tuple[Any, ...]]


class Pool:
    def __init__(self, dsn: str | None, *, size: int = 4, password: str | None = None) -> None:
        self._dsn = dsn
        self._password = password
        self._size = size
        self._idle: asyncio.Queue[Conn] = asyncio.Queue()
        self._opened = 0
        self._lock = asyncio.Lock()
        self._writer: Conn | None = None
        self._writing = asyncio.Lock()

    async def _open_reader(self) -> Conn:
        conn = await connect(self._dsn, password=self._password)
        await conn.set_autocommit(True)
        await conn.execute("SET default_transaction_read_only = on")
        return conn

    async def _get(self) -> Conn:
        async with self._lock:
            if self._idle.empty() and self._opened < self._size:
                self._opened += 1
                try:
                    return await self._open_reader()
                except BaseException:
                    self._opened -= 1
                    raise
        return await self._idle.get()

    def _put(self, conn: Conn) -> None:
        if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self._opened -= 1
            if not conn.closed:
                asyncio.get_running_loop().create_task(conn.close())
            return
        self._idle.put_nowait(conn)

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[Conn]:
        """A read-only connection (each statement its own read-only transaction)."""
        conn = await self._get()
        try:
            yield conn
        finally:
            self._put(conn)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """The writing connection, one user at a time (the caller's code commits)."""
        async with self._writing:
            if self._writer is None or self._writer.closed:
                self._writer = await connect(self._dsn, password=self._password)
            conn = self._writer
            try:
                yield conn
            except BaseException:
                if not conn.closed:
                    try:
                        await conn.rollback()
                    except psycopg.Error:
                        await conn.close()
                raise

    async def close(self) -> None:
        while not self._idle.empty():
            await self._idle.get_nowait().close()
        self._opened = 0
        if self._writer is not None:
            with contextlib.suppress(psycopg.Error):
                await self._writer.close()
            self._writer = None
