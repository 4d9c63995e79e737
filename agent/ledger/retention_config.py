"""The `retention:` section of `ledger.yaml` (ledger.md "Retention and the identity horizon").

```yaml
retention:
  arrivals: 90d               # arrivals with their raw lines (not those a kept row names)
  notifications: 30d          # sent notifications
  canonical_payloads: 365d    # a canonical's payload; its compact identity stays
  identity_horizon: 5y        # the compact identities: >= every other period
  reviewed: 365d              # conflicts and pending arrivals after their last review mark
  archive_dir: /var/lib/edge-ledger/archive   # written before anything is dropped
  every: 1h                   # `ledger run` prunes this often
  batch: 5000                 # rows per delete transaction
  partition: month            # arrival and notification time partitions: month or day
  partitions_ahead: 2         # made ahead: the current period and this many after it
  database_budget: 400GB      # optional: what the database may take (EdgeLedgerRoomRunningOut)
  duty: 0.5                   # the prune works at most this share of the time (rests the rest)
```
Durations as elsewhere (`30d`, `12h`, `2w`) plus years (`5y` = 5 x 365 days).
Without the section nothing is ever pruned and no delivery is `beyond_horizon`.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from typing import Any

from agent.config.retention import _number
from agent.config.units import parse_duration, parse_size
from agent.config.yaml_lines import _int_in, _one_of, _Section, _text

DAY = 86400.0
YEAR = 365 * DAY
_YEARS = re.compile(r"\s*(\d+(?:\.\d+)?)\s*y\s*", re.IGNORECASE)

PERIODS = ("arrivals", "notifications", "canonical_payloads", "reviewed")


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    archive_dir: str
    arrivals_s: float = 90 * DAY
    notifications_s: float = 30 * DAY
    canonical_payloads_s: float = 365 * DAY
    identity_horizon_s: float = 5 * YEAR
    reviewed_s: float = 365 * DAY
    every_s: float = 3600.0
    batch: int = 5000
    partition: str = "month"
    partitions_ahead: int = 2
    database_budget: int = 0  # bytes the database may take (0: none stated); the room alert's limit
    duty: float = 0.5  # the prune's share of the wall time (agent.core.duty); 1.0: no rest

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _size(v: Any) -> int:
    n = parse_size(v)
    if n <= 0:
        raise ValueError("must be more than 0 bytes")
    return n


def duration(v: Any) -> float:
    """A duration of `agent.config.units` or a number of years (`5y`); longer than 0."""
    m = _YEARS.fullmatch(v) if isinstance(v, str) else None
    seconds = float(m.group(1)) * YEAR if m else parse_duration(v)
    if seconds <= 0:
        raise ValueError("must be longer than 0")
    return seconds


def _dir(check_files: bool) -> Any:
    def read(v: Any) -> str:
        text = _text(v)
        if not os.path.isabs(text):
            raise ValueError(f"{text!r} must be an absolute path")
        if check_files and os.path.exists(text) and not os.path.isdir(text):
            raise ValueError(f"{text} is not a directory")
        return text

    return read


def retention_section(s: _Section, check_files: bool) -> RetentionSettings:
    """Read `retention:`; every problem recorded with its file:line."""
    base = RetentionSettings("")
    archive_dir = s.get("archive_dir", _dir(check_files), "", required=True)
    periods = {name: s.get(name, duration, getattr(base, f"{name}_s")) for name in PERIODS}
    horizon = s.get("identity_horizon", duration, base.identity_horizon_s)
    every = s.get("every", duration, base.every_s)
    batch = s.get("batch", _int_in(100, 1_000_000), base.batch)
    partition = s.get("partition", _one_of("month", "day"), base.partition)
    ahead = s.get("partitions_ahead", _int_in(1, 366), base.partitions_ahead)
    budget = s.get("database_budget", _size, base.database_budget)
    duty = s.get("duty", _number(float, 0.01, 1.0), base.duty)  # as the gateway's `duty`
    s.finish()
    longer = [name for name, v in periods.items() if v > horizon]
    if longer:
        s.problem(
            "identity_horizon",
            f"must be at least as long as {', '.join(longer)}: a compact identity outlives every full row",
        )
    return RetentionSettings(
        archive_dir,
        arrivals_s=periods["arrivals"],
        notifications_s=periods["notifications"],
        canonical_payloads_s=periods["canonical_payloads"],
        identity_horizon_s=horizon,
        reviewed_s=periods["reviewed"],
        every_s=every,
        batch=batch,
        partition=partition,
        partitions_ahead=ahead,
        database_budget=budget,
        duty=duty,
    )
