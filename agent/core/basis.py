"""The identity basis of an event: where its transitionId came from (pure; contract sections 4, 7, 8).

Three bases, each with its own guarantee, so an operator can tell them apart in every report
and upstream event:

* ``counter``: the controller gave the id (a transition counter, a ring entry, an import line
  carrying the source's own id). Two real transitions never share it.
* ``event_id``: an OPC UA Alarms & Conditions ``EventId`` (contract section 7), opaque.
* ``window``: a window key made by the agent for a channel without a counter (contract
  section 8, opt in): ``w:<state>:<window index>``. Two real changes to the same state inside
  one window are one event, and two reads of one change that straddle a window boundary are
  two. Every result, report row and upstream event of such a key carries the flag
  ``window_key``, so no one mistakes it for an id the controller gave.

Imports nothing of ours (the contract imports it).
"""

from __future__ import annotations

from enum import StrEnum


class IdentityBasis(StrEnum):
    """Where an event's transitionId came from (the stored and shown word)."""

    COUNTER = "counter"
    EVENT_ID = "event_id"
    WINDOW = "window"


BASES = tuple(b.value for b in IdentityBasis)

WINDOW_KEY = "window_key"
"""The flag on every result, report row and upstream event of a window key."""


def basis_flags(basis: str) -> tuple[str, ...]:
    """The flags a delivery of this basis carries on its result (``window_key`` for a window key)."""
    return (WINDOW_KEY,) if basis == IdentityBasis.WINDOW else ()
