"""When the database fails over (ledger.md section 7): which errors mean "unavailable", the
connection defaults that make a dead host cost seconds, and the replication state the ledger sees.

* Unavailable (reconnect, retry the batch, never crash, never acknowledge): a broken or refused
  connection (psycopg's `OperationalError`, with or without an SQLSTATE: at a cut it has none),
  a write refused by a standby (`25006` read_only_sql_transaction, an `InternalError` in
  psycopg), an administrator's or the server's shutdown (`57P01`-`57P03`), and class `08`.
* Defaults added to a DSN unless it (or the libpq environment) names them: `connect_timeout`
  (libpq waits forever by default), `tcp_user_timeout` and keepalives (a host that vanished
  mid-query otherwise costs the kernel's retransmission timeout, minutes), and
  `target_session_attrs=read-write`, so a multi-host DSN (`host=a,b port=P1,P2`) connects to the
  primary, wherever it is, and a standby-only DSN waits with libpq's reason instead of failing
  every batch with 25006.
* Replication state: `synchronous_standby_names`, `synchronous_commit` and the standbys of
  `pg_stat_replication`; `sync_ok` is what `require_sync_standby: true` waits for. The
  `sync_state` column is visible only to a superuser or a member of `pg_monitor`
  (`pg_read_all_stats`); without it no standby is seen as synchronous and the ledger refuses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import psycopg

UNAVAILABLE_SQLSTATES = frozenset({"25006", "57P01", "57P02", "57P03"})
CONNECTION_CLASS = "08"

DEFAULTS: dict[str, str] = {
    "connect_timeout": "5",  # seconds, per host tried
    "tcp_user_timeout": "10000",  # ms of unacknowledged data before the kernel drops the connection
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "3",
    "keepalives_count": "3",
    "target_session_attrs": "read-write",
}
_ENV = {
    "connect_timeout": "PGCONNECT_TIMEOUT",
    "target_session_attrs": "PGTARGETSESSIONATTRS",
}
SYNC_COMMIT_LEVELS = frozenset({"on", "remote_write", "remote_apply"})


def unavailable(exc: BaseException) -> bool:
    """True when `exc` means: the server is away or cannot take writes now; reconnect and retry."""
    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate or ""
    if state in UNAVAILABLE_SQLSTATES or state.startswith(CONNECTION_CLASS):
        return True
    return isinstance(exc, psycopg.OperationalError)


def conninfo(dsn: str | None, *, password: str | None = None) -> str:
    """`dsn` (URI or key=value, possibly multi-host) with the defaults above where it names none."""
    text = dsn or ""
    given = psycopg.conninfo.conninfo_to_dict(text) if text else {}
    extra: dict[str, Any] = {
        k: v for k, v in DEFAULTS.items() if k not in given and not os.environ.get(_ENV.get(k, ""), "")
    }
    if password:
        extra["password"] = password
    return psycopg.conninfo.make_conninfo(text, **extra)


@dataclass(frozen=True, slots=True)
class Standby:
    name: str
    state: str | None
    sync_state: str | None


@dataclass(frozen=True, slots=True)
class ReplicationState:
    """What the ledger can see of the durability of its commits on the server it writes to."""

    synchronous_standby_names: str
    synchronous_commit: str
    standbys: tuple[Standby, ...] = field(default_factory=tuple)

    @property
    def sync_standbys(self) -> int:
        return sum(1 for s in self.standbys if s.sync_state in ("sync", "quorum") and s.state == "streaming")

    @property
    def sync_ok(self) -> bool:
        """A commit acknowledged now is on a synchronous standby too."""
        return (
            bool(self.synchronous_standby_names.strip())
            and self.synchronous_commit in SYNC_COMMIT_LEVELS
            and self.sync_standbys > 0
        )

    def describe(self) -> str:
        names = self.synchronous_standby_names or "''"
        listed = ", ".join(f"{s.name}({s.state}/{s.sync_state})" for s in self.standbys) or "none"
        verdict = (
            "commits wait for a synchronous standby"
            if self.sync_ok
            else "an acknowledged commit can be lost if this server fails over"
        )
        return (
            f"synchronous_standby_names={names} synchronous_commit={self.synchronous_commit}"
            f" standbys={listed}: {verdict}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "synchronous_standby_names": self.synchronous_standby_names,
            "synchronous_commit": self.synchronous_commit,
            "standbys": [
                {"application_name": s.name, "state": s.state, "sync_state": s.sync_state}
                for s in self.standbys
            ],
            "sync_ok": self.sync_ok,
        }


async def replication_state(conn: psycopg.AsyncConnection[Any]) -> ReplicationState:
    """Read the state (ends the read-only transaction it opened)."""
    cur = await conn.execute(
        "SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit')"
    )
    row = await cur.fetchone()
    assert row is not None
    cur = await conn.execute(
        "SELECT application_name, state, sync_state FROM pg_stat_replication ORDER BY application_name"
    )
    standbys = tuple(Standby(str(r[0]), r[1], r[2]) for r in await cur.fetchall())
    await conn.rollback()
    return ReplicationState(str(row[0]), str(row[1]), standbys)


class Gauges:
    """The ledger's failover figures as plain numbers, for whichever metrics endpoint reads them
    (`values()`): names in Prometheus style."""

    def __init__(self) -> None:
        self.sync_standby_ok = 0.0  # 1 while the last check saw a synchronous standby
        self.sync_standby_refusals = 0.0  # batches refused for want of a synchronous standby
        self.outages = 0.0  # times the database became unavailable
        self.batches_rerun = 0.0  # batches run again after an unknown or failed outcome

    def values(self) -> dict[str, float]:
        return {
            "edge_ledger_sync_standby_ok": self.sync_standby_ok,
            "edge_ledger_sync_standby_refusals_total": self.sync_standby_refusals,
            "edge_ledger_database_outages_total": self.outages,
            "edge_ledger_batches_rerun_total": self.batches_rerun,
        }


GAUGES = Gauges()
