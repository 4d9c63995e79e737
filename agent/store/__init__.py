"""The event store (SQLite only): `Store` is the one writer, `Reader` a read-only view.

Nothing outside this package touches a connection, a lock, a cursor or SQL text.
"""

from agent.core.decide import BootSighting, Outcome
from agent.store.reader import Reader
from agent.store.store import Store

__all__ = ["BootSighting", "Outcome", "Reader", "Store"]
