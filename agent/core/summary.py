"""The report's summary counts, in the contract's field names (pure): one shape for the gateway's
SQLite store and the central ledger, whatever queries gave the numbers."""

from __future__ import annotations

from collections.abc import Mapping

from agent.core.contract import Decision


def summary_counts(
    by_decision: Mapping[str, int],
    *,
    events: int,
    arrivals: int,
    boots: int,
    gaps: int,
    anomalies: int,
    delivery_attempts: int,
) -> dict[str, int]:
    """`by_decision` counts arrivals per decision value; the rest are table counts."""
    return {
        "source_events": events,
        "arrivals": arrivals,
        "duplicates": by_decision.get(Decision.DUPLICATE.value, 0),
        "conflicts": by_decision.get(Decision.CONFLICT.value, 0),
        "identity_incomplete": by_decision.get(Decision.IDENTITY_INCOMPLETE.value, 0),
        "rejected": by_decision.get(Decision.REJECTED.value, 0),
        "inserted": by_decision.get(Decision.INSERTED.value, 0),
        "boots": boots,
        "gaps": gaps,
        "anomalies": anomalies,
        "delivery_attempts": delivery_attempts,
    }
