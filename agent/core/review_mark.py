"""A person's review mark on a conflict or an identity-incomplete arrival (pure).

The gateway's store (`agent.store.review`) and the ledger (`agent.ledger.review`) keep the same
thing: appended, never updated or deleted; the arrival, its canonical event and the pending list
stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass


class NotReviewable(LookupError):
    """The arrival id names no arrival, or one that is neither a conflict nor identity-incomplete."""


@dataclass(frozen=True, slots=True)
class Mark:
    mark_id: int
    arrival_id: int
    kind: str
    note: str
    marked_at: str
    marked_by: str | None
