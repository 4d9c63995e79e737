"""A batch whose COMMIT outcome is unknown (ledger.md section 7): the connection is cut right after
COMMIT was sent (a proxy the test controls), the server committed, the ledger acknowledged
nothing and runs the batch again: the same decisions, no second arrival, conflict or pending row.
Also the error classification and the DSN defaults, table-driven."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from conftest import TEMPLATE, _new_database
from psycopg import errors as pg_errors
from tcpproxy import Proxy

from agent.ledger import failover
from agent.ledger.arrivals import Arrival
from agent.ledger.cloudevents import parse_body
from agent.ledger.errors import LedgerUnavailable
from agent.ledger.writer import Writer

T0 = "2026-04-22T08:00:12.120Z"


def transition(
    gateway: str, tid: str, data: dict[str, Any], attempt: int = 1, boot: str | None = "B1"
) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "specversion": "1.0",
        "id": f"{boot}:{tid}",
        "source": "plant/PLC-1/Trip",
        "type": "io.edgeagent.transition",
        "time": T0,
        "transitionid": tid,
        "arrivalat": T0,
        "gateway": gateway,
        "attempt": attempt,
        "replayed": False,
        "data": data,
    }
    if boot is not None:
        ev["bootid"] = boot
    return ev


def mixed_batch() -> list[Arrival]:
    """One of every decision, and records: what a re-run must reproduce exactly."""
    events: list[Any] = [
        transition("gw-a", "T1", {"state": "Trip"}),
        transition("gw-b", "T1", {"state": "Trip"}),  # the redundant gateway: duplicate
        transition("gw-c", "T1", {"state": "Ready"}),  # other content: conflict
        transition("gw-a", "T2", {"state": "Trip"}, boot=None),  # no bootid: identity incomplete
        {"specversion": "1.0", "source": "plant/PLC-1/Trip", "type": "io.edgeagent.transition"},  # no id
        {
            "specversion": "1.0",
            "id": "B1",
            "source": "plant/PLC-1",
            "type": "io.edgeagent.boot_observed",
            "bootid": "B1",
            "arrivalat": T0,
            "gateway": "gw-a",
            "attempt": 1,
            "data": {"live": True},
        },
        {
            "specversion": "1.0",
            "id": "gap:B1:3:4",
            "source": "plant/PLC-1/Trip",
            "type": "io.edgeagent.gap",
            "bootid": "B1",
            "arrivalat": T0,
            "gateway": "gw-a",
            "attempt": 1,
            "data": {"kind": "gap", "from": "3", "to": "4"},
        },
    ]
    return parse_body(json.dumps(events).encode(), batch=True, via="http", now=T0)


EXPECTED = ["inserted", "duplicate", "conflict", "identity_incomplete", "rejected", "inserted", "inserted"]
TABLES = ("canonical_event", "arrival", "conflict", "pending", "boot", "anomaly")


def counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in TABLES}  # type: ignore[index]


@pytest.fixture
async def proxy(pg_cluster: Any) -> AsyncIterator[Proxy]:
    p = Proxy(pg_cluster.port)
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


async def test_a_batch_cut_after_commit_runs_again_with_the_same_decisions_and_no_second_row(
    pg_cluster: Any, ledger_dsn: str, proxy: Proxy
) -> None:
    batch = mixed_batch()
    reference = Writer(_new_database(pg_cluster, TEMPLATE))  # the same batch, never cut
    try:
        want = [oc.decision.value for oc in await reference.record(batch)]
    finally:
        await reference.close()
    assert want == EXPECTED

    via_proxy = ledger_dsn.replace(f"port={pg_cluster.port}", f"port={proxy.port}")
    writer = Writer(via_proxy, clock=lambda: 0.0)  # a frozen clock: no backoff wait between tries
    try:
        await writer.connect_now()
        proxy.cut_after_commit()
        with pytest.raises(LedgerUnavailable):
            await writer.record(batch)
        assert proxy.cuts == 1
        first = counts(ledger_dsn)
        assert first["arrival"] == len(batch), "the cut batch did commit: its outcome was only unknown"
        writer._next_try = 0.0
        again = [oc.decision.value for oc in await writer.record(batch)]
        assert again == want, "a re-run gives the decisions of the run that committed"
        assert counts(ledger_dsn) == first, "no second arrival, conflict, pending or record row"
        assert first == {
            "canonical_event": 1,
            "arrival": 7,
            "conflict": 1,
            "pending": 1,
            "boot": 1,
            "anomaly": 1,
        }

        # A gateway's resend with the next attempt is a delivery of its own, kept as evidence.
        resend = parse_body(
            json.dumps([transition("gw-a", "T1", {"state": "Trip"}, attempt=2)]).encode(),
            batch=True,
            via="http",
            now=T0,
        )
        assert [oc.decision.value for oc in await writer.record(resend)] == ["duplicate"]
        assert counts(ledger_dsn)["arrival"] == 8
        # ... and the same resend run again is not.
        assert [oc.decision.value for oc in await writer.record(resend)] == ["duplicate"]
        assert counts(ledger_dsn)["arrival"] == 8
    finally:
        await writer.close()


async def test_a_repeat_of_one_delivery_inside_a_batch_is_one_arrival(ledger_dsn: str) -> None:
    """A broker's redelivery of a message the ledger committed but had not acknowledged can land
    in the same batch as ... itself: one delivery, one arrival, the same decision twice."""
    one = mixed_batch()[0]
    writer = Writer(ledger_dsn)
    try:
        assert [oc.decision.value for oc in await writer.record([one, one])] == ["inserted", "inserted"]
    finally:
        await writer.close()
    assert counts(ledger_dsn)["arrival"] == 1


@pytest.mark.parametrize(
    ("exc", "unavailable"),
    [
        (pg_errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"), True),
        (pg_errors.AdminShutdown("terminating connection due to administrator command"), True),
        (pg_errors.CrashShutdown("crash"), True),
        (pg_errors.CannotConnectNow("the database system is starting up"), True),
        (psycopg.OperationalError("consuming input failed: server closed the connection"), True),
        (pg_errors.ConnectionFailure("connection failure"), True),
        (pg_errors.UniqueViolation("duplicate key"), False),
        (pg_errors.UndefinedTable("no such table"), False),
        (psycopg.InternalError("internal"), False),
        (ValueError("not a database error"), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_which_errors_mean_unavailable(exc: BaseException, unavailable: bool) -> None:
    assert failover.unavailable(exc) is unavailable


@pytest.mark.parametrize(
    ("dsn", "env", "want"),
    [
        ("host=a,b port=1,2 dbname=l", {}, {"connect_timeout": "5", "target_session_attrs": "read-write"}),
        ("host=a connect_timeout=30", {}, {"connect_timeout": "30", "tcp_user_timeout": "10000"}),
        (
            "postgresql://u@a:1,b:2/l?target_session_attrs=any",
            {},
            {"target_session_attrs": "any", "host": "a,b"},
        ),
        ("", {"PGCONNECT_TIMEOUT": "9"}, {"connect_timeout": None, "keepalives": "1"}),
        ("", {"PGTARGETSESSIONATTRS": "primary"}, {"target_session_attrs": None}),
    ],
)
def test_dsn_defaults_never_override_what_the_dsn_or_the_environment_says(
    dsn: str, env: dict[str, str], want: dict[str, str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    for k in ("PGCONNECT_TIMEOUT", "PGTARGETSESSIONATTRS"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    got = psycopg.conninfo.conninfo_to_dict(failover.conninfo(dsn))
    for k, v in want.items():
        assert got.get(k) == v, k


def test_importing_the_same_file_again_gives_the_first_decisions_and_adds_no_arrival(
    tmp_path: Any, ledger_dsn: str
) -> None:
    """An import line's arrival key is (the file's SHA-256, the line number): `ledger import` run
    again after it was cut (or by mistake) is a re-run, not a second delivery."""
    import subprocess
    import sys

    f = tmp_path / "capture.jsonl"
    f.write_text(
        '{"source":"P/T","transitionId":1,"bootId":"B1","payload":{"v":1}}\n'
        '{"source":"P/T","transitionId":1,"bootId":"B1","payload":{"v":1}}\n'
        '{"source":"P/T","transitionId":1,"bootId":"B1","payload":{"v":2}}\n'
        "not json\n"
    )
    cmd = [sys.executable, "-m", "agent", "ledger", "--dsn", ledger_dsn, "import", str(f), "--json"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    assert [json.loads(x)["decision"] for x in first.splitlines()] == [
        "inserted",
        "duplicate",
        "conflict",
        "rejected",
    ]
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    assert again == first
    assert counts(ledger_dsn)["arrival"] == 4 and counts(ledger_dsn)["conflict"] == 1


async def test_one_record_sent_from_two_outbox_rows_of_one_gateway_is_two_arrivals(ledger_dsn: str) -> None:
    """An operator's replay puts the record in the outbox again: the new row goes out as attempt 1,
    replayed, like the first replay did. The gateway's `outboxid` (its store's UUID and the row's
    id) makes the two deliveries two arrivals at the ledger (the arrival key hashes the event's
    text); each re-run of either adds none."""
    from agent.core.records import Entry, Transition
    from agent.sinks.encode import encode

    rec = Transition(1, "PLC-1/Trip", "T9", "B1", T0, '{"state":"Trip"}', T0)
    store = "6f1c2b9e-3d4a-4c5b-9e8f-0a1b2c3d4e5f"

    def sent(outbox_id: int) -> list[Arrival]:
        ev = encode(
            Entry(outbox_id=outbox_id, kind="transition", ref_id=1, attempt=1, record=rec),
            site="plant", gateway="gw-a", replayed=True, store_id=store,
        )  # fmt: skip
        return parse_body(ev.body, batch=False, via="http", now=T0)

    first, second = sent(11), sent(12)
    writer = Writer(ledger_dsn)
    try:
        assert [oc.decision.value for oc in await writer.record(first)] == ["inserted"]
        assert [oc.decision.value for oc in await writer.record(second)] == ["duplicate"]
        assert [oc.decision.value for oc in await writer.record(first + second)] == ["inserted", "duplicate"]
    finally:
        await writer.close()
    assert counts(ledger_dsn)["arrival"] == 2
