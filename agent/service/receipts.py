"""The receipts of one upstream (`receipts: true`): the ledger's word that it committed rows.

The upstream's sink hands over each receipt's body and says when it has a new connection; this
keeper, one task beside the upstream's forwarder, turns them into the store's states:

* a receipt for this store names outbox ids: those rows of this upstream become `delivered`
  (`Outbox.confirm`), whether they are `sent` or still `pending`;
* a new connection: every row `sent` before it goes back to `pending` (the receipts meant for
  the connection before it are gone with its clean session; after a restart the first connection
  does this for the rows the last run left `sent`); rows sent on the new connection wait for
  their own receipts;
* a `sent` row without a receipt after `receipt_timeout` goes back to `pending`. While no receipt
  comes at all (the ledger or its database is away) the wait doubles after each such round, up to
  `MAX_WAIT_S`, so a long outage does not fill the broker with copies; the first receipt brings
  it back to `receipt_timeout`.

Rows put back to `pending` are sent again by the forwarder (same id, next attempt); the ledger's
arrival keys make a resend one more arrival, never a second canonical event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from agent.core.errors import StoreError
from agent.core.receipts import ReceiptError, decode_receipt, receipt_topic
from agent.core.timestamps import format_timestamp
from agent.core.wording import counted
from agent.store.outbox import Outbox

log = logging.getLogger(__name__)

MAX_WAIT_S = 1800.0  # the longest a `sent` row waits for its receipt while none comes at all
MAX_QUEUED = 10_000  # receipts held before the store took them (each names a ledger batch)


@dataclass
class ReceiptCounts:
    """What the receipts of one upstream did in this run (read by tests and bench/replay.py; the
    operator's view is the store's: rows awaiting a receipt in `status`, `outbox`, the metrics)."""

    receipts: int = 0  # receipts taken for this store
    confirmed: int = 0  # rows they turned delivered
    resent: int = 0  # `sent` rows put back to pending (overdue, or a new connection)
    refused: int = 0  # messages on the topic that were not a receipt of this store
    wait_s: float = 0.0  # how long a sent row waits now


class ReceiptKeeper:
    """Receipts in, store states out, for one upstream. Feed it with `on_receipt` and
    `on_connection` (the sink's callbacks, on the event loop); `await run(stop)` beside the
    forwarder; `rewind` is called when rows went back to `pending` behind the forwarder's cursor."""

    def __init__(
        self,
        outbox: Outbox,
        upstream: str,
        store_id: str,
        gateway: str,
        timeout_s: float,
        clock: Callable[[], datetime],
        rewind: Callable[[], None],
    ) -> None:
        self.outbox = outbox
        self.upstream = upstream
        self.store_id = store_id
        self.topic = receipt_topic(gateway, store_id)
        self.timeout_s = timeout_s
        self.clock = clock
        self.rewind = rewind
        self.counts = ReceiptCounts(wait_s=timeout_s)
        self._bodies: list[bytes] = []
        self._new_connection: str | None = None  # when the newest connection was subscribed
        self._wake = asyncio.Event()
        self._heard_since_check = False

    def on_receipt(self, body: bytes) -> None:
        if len(self._bodies) >= MAX_QUEUED:
            self.counts.refused += 1  # dropped: the rows it names are sent again when overdue
            return
        self._bodies.append(body)
        self._wake.set()

    def on_connection(self) -> None:
        self._new_connection = self._now()
        self._wake.set()

    def on_wake(self) -> None:
        """Look now (the forwarder stopped: what came is taken before `run` returns)."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop` (and a wake-up): receipts that came until then are taken first."""
        loop = asyncio.get_running_loop()
        next_check = loop.time() + self._tick()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, next_check - loop.time()))
            self._wake.clear()
            try:
                await self._take()
                if loop.time() >= next_check:
                    await self._overdue()
                    next_check = loop.time() + self._tick()
            except StoreError as exc:  # the rows keep their state; tried again on the next turn
                log.error("receipts cannot use the store upstream=%s error=%s", self.upstream, exc)
                await asyncio.sleep(1.0)
            if stop.is_set():
                return

    def _tick(self) -> float:
        return max(0.2, min(5.0, self.timeout_s / 4))

    async def _take(self) -> None:
        bodies, self._bodies = self._bodies, []
        new_connection, self._new_connection = self._new_connection, None
        ids: list[int] = []
        for body in bodies:
            try:
                receipt = decode_receipt(body)
            except ReceiptError as exc:
                self.counts.refused += 1
                log.warning("not a receipt upstream=%s topic=%s: %s", self.upstream, self.topic, exc)
                continue
            if receipt.store != self.store_id:
                self.counts.refused += 1
                log.warning(
                    "a receipt for store %s, not this store (%s): ignored", receipt.store, self.store_id
                )
                continue
            self.counts.receipts += 1
            ids.extend(receipt.ids())
        if bodies and ids:
            self._heard_since_check = True
            if self.counts.wait_s != self.timeout_s:
                log.info(
                    "receipts come again upstream=%s: a sent row waits %.0f s", self.upstream, self.timeout_s
                )
            self.counts.wait_s = self.timeout_s
            self.counts.confirmed += await self.outbox.confirm(self.upstream, ids, self._now())
        if new_connection is not None:
            back = await self.outbox.requeue_sent(self.upstream, sent_before=new_connection)
            if back:
                self.counts.resent += back
                log.warning(
                    "new connection upstream=%s: %s without a receipt are sent again",
                    self.upstream,
                    counted(back, "row"),
                )
                self.rewind()

    async def _overdue(self) -> None:
        cutoff = format_timestamp(self.clock() - timedelta(seconds=self.counts.wait_s))
        back = await self.outbox.requeue_sent(self.upstream, sent_before=cutoff)
        if back:
            self.counts.resent += back
            log.warning(
                "no receipt within %.0f s upstream=%s: %s sent again",
                self.counts.wait_s,
                self.upstream,
                counted(back, "row"),
            )
            self.rewind()
            if not self._heard_since_check:  # nothing at all came back: the ledger is away
                self.counts.wait_s = min(MAX_WAIT_S, self.counts.wait_s * 2)
        self._heard_since_check = False

    def _now(self) -> str:
        return format_timestamp(self.clock())
