"""A few PostgreSQL connections shared by the page handlers (no extra dependency).

Each page borrows one connection for its queries; reads run in a READ ONLY transaction that is
rolled back at the end, so a GET can never write (even through a mistake in a query).
"""

from __future__ import annotations

import asyncio
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

    async def _get(self) -> Conn:
        async with self._lock:
            if self._idle.empty() and self._opened < self._size:
                self._opened += 1
                try:
                    return await connect(self._dsn, password=self._password)
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
    async def connection(self) -> AsyncIterator[Conn]:
        """A connection for a write (the caller commits)."""
        conn = await self._get()
        try:
            yield conn
        except BaseException:
            if not conn.closed:
                try:
                    await conn.rollback()
                except psycopg.Error:
                    await conn.close()
            raise
        finally:
            self._put(conn)

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[Conn]:
        """A connection inside a READ ONLY transaction, rolled back afterwards."""
        async with self.connection() as conn:
            await conn.execute("SET TRANSACTION READ ONLY")  # psycopg opened the transaction
            try:
                yield conn
            finally:
                if not conn.closed:
                    await conn.rollback()

    async def close(self) -> None:
        while not self._idle.empty():
            conn = self._idle.get_nowait()
            await conn.close()
        self._opened = 0
