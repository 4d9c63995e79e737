"""The notification worker: claim due rows, send them, settle them (ledger.md section 4).

1. Claim: one committed statement `UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED)`
   spends an attempt (`attempts + 1`) and sets `visible_at = now() + lease`. Two workers never
   hold one row; a row whose worker dies comes back when the lease passes (the lease is the
   rescuer, as pgmq's visibility timeout), so no sweeper is needed.
2. Send with no transaction open: `POST` of {kind, idempotency_key, attempt, event} with the
   headers `Idempotency-Key` and `Notification-Attempt`. A crash between the send and the mark
   gives a resend with the next attempt and the same key: "deduplicated once; side effects
   retried with idempotency keys".
3. Settle, fenced on (id, attempt): a late answer of an attempt whose lease was taken over
   changes nothing. 2xx -> `sent`; anything else -> back off (capped, jittered: the core's
   `retry`) or `dead` after the last attempt; dead rows wait for `ledger notifications retry`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import psycopg

from agent.core import cloudevent_ids, timestamps
from agent.core.contract import Key
from agent.core.retry import backoff_s
from agent.ledger import failover
from agent.ledger.connection import connect
from agent.ledger.errors import LedgerUnavailable
from agent.ledger.notifications import CHANNEL, ce_id

log = logging.getLogger(__name__)

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

CLAIM = """
WITH claimed AS (
    UPDATE notification n
    SET attempts = n.attempts + 1, visible_at = now() + make_interval(secs => n.lease_s)
    WHERE n.id IN (
        SELECT id FROM notification
        WHERE state = 'pending' AND visible_at <= now() AND attempts < max_attempts
        ORDER BY visible_at, id
        LIMIT %s
        FOR UPDATE SKIP LOCKED)
    RETURNING n.id, n.canonical_id, n.kind, n.url, n.idempotency_key, n.attempts, n.max_attempts)
SELECT c.id, c.kind, c.url, c.idempotency_key, c.attempts, c.max_attempts,
       e.source, e.transition_id, e.boot_id, e.source_ts, e.payload, e.inserted_arrival_at, e.first_gateway
FROM claimed c JOIN canonical_event e ON e.id = c.canonical_id
ORDER BY c.id
"""

# A row whose last attempt's lease ran out (its worker died after spending it) is dead.
EXPIRE = """
UPDATE notification SET state = 'dead',
       last_error = coalesce(last_error, 'no answer recorded for the last attempt (lease ran out)')
WHERE state = 'pending' AND visible_at <= now() AND attempts >= max_attempts
"""

MARK_SENT = """
UPDATE notification SET state = 'sent', sent_at = now(), last_error = NULL
WHERE id = %s AND attempts = %s AND state = 'pending'
"""

MARK_FAILED = """
UPDATE notification
SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
    visible_at = now() + make_interval(secs => %s),
    last_error = %s,
    errors = errors || %s::text
WHERE id = %s AND attempts = %s AND state = 'pending'
"""


@dataclass(frozen=True, slots=True)
class Claimed:
    id: int
    kind: str
    url: str
    idempotency_key: str
    attempt: int
    max_attempts: int
    event: dict[str, Any]


def _event(r: tuple[Any, ...]) -> dict[str, Any]:
    """The canonical event as a structured CloudEvent (its source as the ledger holds it)."""
    source, tid, bid, ts, payload, first_arrival, gateway = r[6:13]
    ev: dict[str, Any] = {
        "specversion": "1.0",
        "id": ce_id(Key(source, tid, bid)),
        "source": source,
        "type": cloudevent_ids.TRANSITION_TYPE,
        "datacontenttype": "application/json",
        "bootid": bid,
        "transitionid": tid,
        "arrivalat": timestamps.format_timestamp(first_arrival),
        "gateway": gateway,
        "data": json.loads(payload),
    }
    if ts is not None:
        ev["time"] = timestamps.format_timestamp(ts)
    return ev


class Notifier:
    """One worker on its own connection. `run(stop)` claims, sends and settles until `stop`."""

    def __init__(
        self,
        dsn: str | None,
        *,
        password: str | None = None,
        batch: int = 50,
        poll_s: float = 1.0,
        timeout_s: float = 10.0,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 600.0,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._dsn, self._password = dsn, password
        self.batch, self.poll_s, self.timeout_s = batch, poll_s, timeout_s
        self.backoff_initial_s, self.backoff_max_s = backoff_initial_s, backoff_max_s
        self._jitter = jitter
        self._conn: Conn | None = None
        self._listen: Conn | None = None
        self._db_lock = asyncio.Lock()  # one connection: one transaction at a time
        self.sent = 0

    async def _db(self) -> Conn:
        if self._conn is None or self._conn.closed:
            self._conn = await connect(self._dsn, password=self._password)
        return self._conn

    async def claim(self) -> list[Claimed]:
        """Spend an attempt on up to `batch` due rows and commit it, before anything is sent."""
        async with self._db_lock:
            conn = await self._db()
            async with conn.transaction():
                await conn.execute(EXPIRE)
                cur = await conn.execute(CLAIM, (self.batch,))
                rows = await cur.fetchall()
        return [Claimed(r[0], r[1], r[2], r[3], r[4], r[5], _event(r)) for r in rows]

    async def send(self, session: aiohttp.ClientSession, c: Claimed) -> str | None:
        """POST one notification; None on 2xx, else the error text."""
        body = {"kind": c.kind, "idempotency_key": c.idempotency_key, "attempt": c.attempt, "event": c.event}
        headers = {"Idempotency-Key": c.idempotency_key, "Notification-Attempt": str(c.attempt)}
        try:
            async with (
                asyncio.timeout(self.timeout_s),
                session.post(c.url, json=body, headers=headers) as resp,
            ):
                if 200 <= resp.status < 300:
                    return None
                return f"HTTP {resp.status}: {(await resp.text(errors='replace'))[:200].strip()}"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return f"{type(exc).__name__}: {exc}".strip()

    async def settle(self, c: Claimed, error: str | None) -> None:
        async with self._db_lock:
            conn = await self._db()
            async with conn.transaction():
                if error is None:
                    await conn.execute(MARK_SENT, (c.id, c.attempt))
                    self.sent += 1
                    return
                delay = backoff_s(
                    c.attempt,
                    initial_s=self.backoff_initial_s,
                    max_s=self.backoff_max_s,
                    jitter=self._jitter(),
                )
                await conn.execute(MARK_FAILED, (delay, error, error, c.id, c.attempt))
        level = logging.ERROR if c.attempt >= c.max_attempts else logging.WARNING
        log.log(
            level,
            "notification id=%d kind=%s attempt=%d/%d failed: %s",
            c.id,
            c.kind,
            c.attempt,
            c.max_attempts,
            error,
        )

    async def run_once(self, session: aiohttp.ClientSession) -> int:
        """One round: claim, send all (concurrently), settle each (shielded). Returns rows claimed."""
        claimed = await self.claim()
        if not claimed:
            return 0

        async def one(c: Claimed) -> None:
            error = await self.send(session, c)
            await asyncio.shield(self.settle(c, error))

        async with asyncio.TaskGroup() as tg:
            for c in claimed:
                tg.create_task(one(c), name=f"notify[{c.id}]")
        return len(claimed)

    async def run(self, stop: asyncio.Event) -> None:
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                try:
                    n = await self.run_once(session)
                except (LedgerUnavailable, psycopg.Error) as exc:
                    if isinstance(exc, psycopg.Error) and not failover.unavailable(exc):
                        raise
                    log.warning("notifier: PostgreSQL unavailable: %s", exc)
                    await self.close()
                    n = 0
                if n == 0:
                    await self._idle(stop)
        await self.close()

    async def _idle(self, stop: asyncio.Event) -> None:
        """Wait for a NOTIFY from an arbiter, `stop`, or `poll_s` (polling anyway: a notification
        is lost while the listening connection is down, and leases run out without one)."""
        waits: list[asyncio.Task[Any]] = [asyncio.create_task(stop.wait(), name="notifier-stop")]
        try:
            if self._listen is None or self._listen.closed:
                self._listen = await psycopg.AsyncConnection.connect(
                    self._conninfo(), autocommit=True, application_name="edge-agent-ledger-listen"
                )
                await self._listen.execute(f"LISTEN {CHANNEL}")
            waits.append(asyncio.create_task(self._one_notify(self._listen), name="notifier-listen"))
        except psycopg.OperationalError as exc:
            log.debug("notifier: no LISTEN connection (%s); polling", exc)
        try:
            await asyncio.wait(waits, timeout=self.poll_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in waits:
                t.cancel()
            for t in waits:
                with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
                    await t

    async def _one_notify(self, conn: Conn) -> None:
        async for _ in conn.notifies(timeout=self.poll_s, stop_after=1):
            return

    def _conninfo(self) -> str:
        return failover.conninfo(self._dsn, password=self._password)  # the primary, short timeouts

    async def close(self) -> None:
        for conn in (self._conn, self._listen):
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    await conn.close()
        self._conn = self._listen = None
