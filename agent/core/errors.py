"""The exception hierarchy. Library exceptions are mapped to these at the adapter boundary."""

from __future__ import annotations


class AgentError(Exception):
    """Base of every error edge-agent raises on purpose."""


class ConfigError(AgentError):
    """The configuration is invalid; the message names file, line and key. Exit code 78."""


class StoreError(AgentError):
    """The store could not be opened, read or written. Nothing uncommitted was kept."""


class StoreFull(StoreError):
    """The disk or the configured size quota is full; committed data is intact."""


class StoreCorrupt(StoreError):
    """The database file failed its integrity check or is not a database."""


class SourceUnavailable(AgentError):
    """A controller could not be read (link down, timeout, exception response)."""


class SinkUnavailable(AgentError):
    """An upstream could not take a delivery right now; retry later."""
