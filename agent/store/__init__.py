"""The event store: schema, batch decisions, report queries."""

from agent.core.decide import BootSighting, Outcome
from agent.store.store import Store

__all__ = ["BootSighting", "Outcome", "Store"]
