"""The ledger's errors; psycopg's exceptions are mapped to these at the connection boundary."""

from __future__ import annotations

from agent.core.errors import AgentError


class LedgerError(AgentError):
    """The ledger database could not be read or written; nothing uncommitted was kept."""


class LedgerUnavailable(LedgerError):
    """PostgreSQL cannot be reached right now (down, restarting, refusing): retry later."""


class SchemaError(LedgerError):
    """The database holds a schema this ledger cannot use (newer, or not a ledger's)."""
