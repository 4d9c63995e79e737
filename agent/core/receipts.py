"""Receipts: the ledger's word that it committed a gateway's outbox rows (pure: no I/O).

A PUBACK only says the broker has a message; a broker restart, a shared subscription it did not
restore or a full queue can still lose it before the ledger reads it. So the ledger, after each
COMMIT, publishes a receipt to the gateway that sent the events, and the gateway keeps its rows
`sent` until one names them (docs/upstream.md, "Receipts").

* Topic: `receipts/<gateway>/<store id>` (`RECEIPT_TOPIC`; the gateway's name as one topic
  level, the store's UUID, so two sites' `gw-1` or a replaced store never read each other's).
* Body: one JSON object, `{"store": "<uuid>", "ranges": [[first, last], ...], "ledger": "<id>"}`:
  the outbox ids committed, as closed ranges in ascending order.

The gateway trusts a receipt only for its own store id and only for the rows of the upstream
whose connection carried it; a receipt that is not one is logged and changes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

RECEIPT_TOPIC = "receipts/{gateway}/{store}"
MAX_RANGES = 10_000  # a receipt of one ledger batch has at most a few; more is not ours
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class ReceiptError(ValueError):
    """A message on a receipts topic that is not a receipt."""


@dataclass(frozen=True, slots=True)
class Receipt:
    store: str
    ranges: tuple[tuple[int, int], ...]
    ledger: str = ""

    def ids(self) -> list[int]:
        return [i for lo, hi in self.ranges for i in range(lo, hi + 1)]


def topic_level(name: str) -> str:
    """A name as one topic level: `+`, `#` and `/` never reach a topic."""
    return "".join("-" if ch in "+#/" else ch for ch in name) or "-"


def receipt_topic(gateway: str, store: str) -> str:
    return RECEIPT_TOPIC.format(gateway=topic_level(gateway), store=topic_level(store))


def parse_outbox_ref(ref: object) -> tuple[str, int] | None:
    """The `outboxid` extension (`<store uuid>:<outbox id>`) as (store, id); None when it is not one."""
    if not isinstance(ref, str):
        return None
    store, sep, number = ref.rpartition(":")
    if not sep or not _UUID.fullmatch(store) or not number.isdigit() or len(number) > 18:
        return None
    return store, int(number)


def ranges(ids: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """Ids as closed ranges, ascending, duplicates folded: [5, 1, 2, 3, 3, 9] -> ((1, 3), (5, 5), (9, 9))."""
    out: list[list[int]] = []
    for i in sorted(set(ids)):
        if out and i == out[-1][1] + 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return tuple((lo, hi) for lo, hi in out)


def encode_receipt(receipt: Receipt) -> bytes:
    body = {"store": receipt.store, "ranges": [list(r) for r in receipt.ranges], "ledger": receipt.ledger}
    return json.dumps(body, separators=(",", ":")).encode()


def decode_receipt(body: bytes) -> Receipt:
    """A receipt's body; ReceiptError says what is wrong with one that is not."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReceiptError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ReceiptError("not a JSON object")
    store, raw, ledger = doc.get("store"), doc.get("ranges"), doc.get("ledger", "")
    if not isinstance(store, str) or not _UUID.fullmatch(store):
        raise ReceiptError(f"`store` must be a store's UUID, not {store!r:.80}")
    if not isinstance(raw, list) or len(raw) > MAX_RANGES:
        raise ReceiptError(f"`ranges` must be a list of at most {MAX_RANGES} [first, last] pairs")
    out: list[tuple[int, int]] = []
    for r in raw:
        if (
            not isinstance(r, list)
            or len(r) != 2
            or not all(type(v) is int and 0 < v < 2**63 for v in r)
            or r[0] > r[1]
        ):
            raise ReceiptError(f"a range must be [first, last] with 0 < first <= last, not {r!r:.80}")
        out.append((r[0], r[1]))
    if sum(hi - lo + 1 for lo, hi in out) > 1_000_000:
        raise ReceiptError("names more than 1,000,000 rows")
    return Receipt(store, tuple(out), ledger if isinstance(ledger, str) else "")


def receipts_for(committed: Iterable[tuple[str, str | None]], ledger: str) -> list[tuple[str, bytes]]:
    """(topic, body) of each receipt owed for a committed batch: one per gateway store, naming every
    outbox row of it in the batch. `committed` is (gateway, `outboxid`) per arrival; an arrival
    without a usable `outboxid` (a sender that is not an edge-agent gateway) gets none."""
    rows: dict[tuple[str, str], list[int]] = {}
    for gateway, ref in committed:
        parsed = parse_outbox_ref(ref)
        if parsed is not None:
            rows.setdefault((gateway, parsed[0]), []).append(parsed[1])
    return [
        (receipt_topic(gateway, store), encode_receipt(Receipt(store, ranges(ids), ledger)))
        for (gateway, store), ids in rows.items()
    ]
