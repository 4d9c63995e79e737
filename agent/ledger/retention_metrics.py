"""Retention on the ledger's `/metrics` (read from the database at each scrape with the rest):

* `edge_ledger_table_bytes{table}`: `pg_total_relation_size` (a partitioned table's partitions summed);
* `edge_ledger_oldest_row_age_seconds{table}`: the oldest row a prune could take (0 when none; a
  time partition's rows counted from where the partition ends: they go with it),
  and `edge_ledger_retention_period_seconds{table}`: the period the last prune kept it for
  (0 before the first prune): the alert EdgeLedgerPruneBehind compares the two;
* `edge_ledger_rows_pruned{table}`, `edge_ledger_rows_archived{table}`: over every prune run
  (`arrival_partitions`, `notification_partitions`: the rows of time partitions taken whole);
* `edge_ledger_oldest_partition_end_timestamp_seconds{table}`: where the oldest time partition of
  arrival and notification ends (0: none);
* `edge_ledger_database_bytes` (`pg_database_size`) and `edge_ledger_database_budget_bytes`
  (`retention.database_budget` as the last prune ran with it; 0: none): EdgeLedgerRoomRunningOut;
* `edge_ledger_last_prune_timestamp_seconds`, `edge_ledger_last_prune_ok` (1 done, 0 failed or
  never run), `edge_ledger_identities`, `edge_ledger_beyond_horizon_arrivals` (kept, and
  `{state="open"}` not reviewed yet).
Registered on the ledger's registry by `agent.ledger.metrics`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from prometheus_client import Gauge

from agent.ledger import prune_sql, retention_state

TABLE_BYTES = Gauge(
    "edge_ledger_table_bytes",
    "Size of each ledger table on disk, indexes included",
    ["table"],
    registry=None,
)
OLDEST_AGE = Gauge(
    "edge_ledger_oldest_row_age_seconds",
    "Age of the oldest row a prune could take, per table (0 when none)",
    ["table"],
    registry=None,
)
PERIOD = Gauge(
    "edge_ledger_retention_period_seconds",
    "How long the last prune kept each table's rows (0 before the first prune)",
    ["table"],
    registry=None,
)
PRUNED = Gauge("edge_ledger_rows_pruned", "Rows pruned over every prune run", ["table"], registry=None)
ARCHIVED = Gauge("edge_ledger_rows_archived", "Rows archived over every prune run", ["table"], registry=None)
LAST_PRUNE = Gauge(
    "edge_ledger_last_prune_timestamp_seconds",
    "Unix time the last prune finished (0: never)",
    registry=None,
)
LAST_PRUNE_OK = Gauge(
    "edge_ledger_last_prune_ok",
    "1 when the last prune completed, 0 when it failed or none ran",
    registry=None,
)
IDENTITIES = Gauge(
    "edge_ledger_identities", "Canonical identities kept (their payload kept or pruned)", registry=None
)
BEYOND = Gauge(
    "edge_ledger_beyond_horizon_arrivals",
    "Arrivals decided beyond_horizon kept (state=open: not reviewed yet)",
    ["state"],
    registry=None,
)
OLDEST_PARTITION_END = Gauge(
    "edge_ledger_oldest_partition_end_timestamp_seconds",
    "Unix time the oldest time partition's range ends, per table (0: none)",
    ["table"],
    registry=None,
)
DATABASE_BYTES = Gauge(
    "edge_ledger_database_bytes", "Size of the ledger's database on disk (pg_database_size)", registry=None
)
DATABASE_BUDGET = Gauge(
    "edge_ledger_database_budget_bytes",
    "retention.database_budget as the last prune ran with it (0: none stated)",
    registry=None,
)
GAUGES = (
    TABLE_BYTES,
    DATABASE_BYTES,
    DATABASE_BUDGET,
    OLDEST_AGE,
    PERIOD,
    PRUNED,
    ARCHIVED,
    LAST_PRUNE,
    LAST_PRUNE_OK,
    IDENTITIES,
    BEYOND,
    OLDEST_PARTITION_END,
)
STEPS = [s.table for s in prune_sql.STEPS]
for _t in retention_state.SETTING_OF:
    OLDEST_AGE.labels(_t)
    PERIOD.labels(_t)
for _t in STEPS:
    PRUNED.labels(_t)
    ARCHIVED.labels(_t)
for _t in retention_state.SIZED:
    TABLE_BYTES.labels(_t)
BEYOND.labels("all")
BEYOND.labels("open")
for _t in ("arrival", "notification"):
    OLDEST_PARTITION_END.labels(_t)
    PRUNED.labels(f"{_t}_partitions")
    ARCHIVED.labels(f"{_t}_partitions")


async def refresh(conn: Any) -> None:
    """Read the retention state into the gauges."""
    r = await retention_state.read(conn)
    now = datetime.now(UTC)
    for table, n in r["table_bytes"].items():
        TABLE_BYTES.labels(table).set(n)
    DATABASE_BYTES.set(r["database_bytes"])
    DATABASE_BUDGET.set(r["database_budget"])
    last = r["last_prune"]
    settings: dict[str, Any] = last["settings"] if last else {}
    for table, oldest in r["oldest"].items():
        OLDEST_AGE.labels(table).set(0 if oldest is None else max(0.0, (now - oldest).total_seconds()))
        PERIOD.labels(table).set(float(settings.get(f"{retention_state.SETTING_OF[table]}_s", 0)))
    for table, t in r["totals"].items():
        PRUNED.labels(table).set(t["pruned"])
        ARCHIVED.labels(table).set(t["archived"])
    finished = last["finished_at"] if last else None
    LAST_PRUNE.set(finished.timestamp() if finished else 0)
    LAST_PRUNE_OK.set(1 if last and last["outcome"] == "done" else 0)
    IDENTITIES.set(r["identities"])
    BEYOND.labels("all").set(r["beyond_horizon"])
    BEYOND.labels("open").set(r["beyond_horizon_open"])
    for table, end in r["oldest_partition_end"].items():
        OLDEST_PARTITION_END.labels(table).set(0 if end is None else end.timestamp())
