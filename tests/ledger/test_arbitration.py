"""The arbitration over a real PostgreSQL: the project's identity table through the ledger, and
two ledger processes importing the same keys at the same time."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent.core.contract import Delivery, Rejection
from agent.core.intake import parse_delivery
from agent.ledger import arbiter, report
from agent.ledger.arrivals import Arrival

NOW = "2026-04-22T09:00:00.000Z"
Conn = psycopg.AsyncConnection[tuple[Any, ...]]


def _identity_cases() -> list[Any]:
    """The SQLite store's table of identity cases, read from its own file (one table, two stores)."""
    path = Path(__file__).parents[1] / "store" / "test_identity_table.py"
    spec = importlib.util.spec_from_file_location("store_identity_table", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.CASES)


async def decide(conn: Conn, lines: list[str], one_batch: bool) -> list[str]:
    items: list[Delivery | Rejection] = [
        parse_delivery(text, arrival_at=NOW, receiver="test", line=n) for n, text in enumerate(lines, 1)
    ]
    arrivals = [Arrival(it, "gw", "import") for it in items]
    if one_batch:
        outcomes = await arbiter.record(conn, arrivals)
    else:
        outcomes = [oc for a in arrivals for oc in await arbiter.record(conn, [a])]
    return [oc.decision.value for oc in outcomes]


@pytest.mark.parametrize("one_batch", [False, True], ids=["batch of one", "one batch"])
@pytest.mark.parametrize(("lines", "expected"), _identity_cases())
async def test_identity_table_through_the_ledger(
    shared_conn: Conn, lines: list[str], expected: list[str], one_batch: bool
) -> None:
    assert await decide(shared_conn, lines, one_batch) == expected
    summary = await report.summary(shared_conn)
    assert summary["arrivals"] == len(lines), "every delivery is kept in the arrival log"
    assert summary["source_events"] == expected.count("inserted")


async def test_a_failed_batch_keeps_nothing_and_the_next_one_goes_on(ledger_conn: Conn) -> None:
    good = parse_delivery('{"source":"P/T","transitionId":1,"bootId":"B1"}', arrival_at=NOW, receiver="t")
    with pytest.raises(psycopg.errors.CheckViolation):
        await arbiter.record(ledger_conn, [Arrival(good, "gw", "carrier-pigeon")])  # type: ignore[arg-type]
    assert (await report.summary(ledger_conn))["arrivals"] == 0
    assert [o.decision.value for o in await arbiter.record(ledger_conn, [Arrival(good, "gw", "http")])] == [
        "inserted"
    ]


async def test_u0000_in_an_id_is_rejected_with_the_reason_and_the_batch_goes_on(ledger_conn: Conn) -> None:
    lines = [
        '{"source":"P/T","transitionId":"T\\u0000","bootId":"B1"}',
        '{"source":"P/T","transitionId":"T2","bootId":"B1","payload":{"note":"a\\u0000b"}}',
    ]
    items = [
        Arrival(parse_delivery(t, arrival_at=NOW, receiver="t", line=n), "gw\x00", "import")
        for n, t in enumerate(lines, 1)
    ]
    outcomes = await arbiter.record(ledger_conn, items)
    assert [o.decision.value for o in outcomes] == ["rejected", "inserted"]
    assert "U+0000" in (outcomes[0].reason or "")
    rows = [a async for a in report.arrivals(ledger_conn)]
    await ledger_conn.rollback()
    assert rows[0]["gateway"] == "gw\\u0000" and "\\u0000" in rows[0]["raw"]


def _file(path: Path, keys: int, seed: int, gateway: str) -> None:
    order = list(range(keys))
    random.Random(seed).shuffle(order)
    with path.open("w") as out:
        for n in order:
            out.write(
                json.dumps(
                    {
                        "source": f"PLC-{n % 13}/Ch{n % 5}",
                        "transitionId": n,
                        "bootId": "B1",
                        "arrivalAt": "2026-04-22T08:00:00.000Z",
                        "payload": {"state": "On", "n": n},
                        "gateway": gateway,
                    }
                )
                + "\n"
            )


def test_two_ledger_processes_importing_the_same_keys_make_one_canonical_each(
    tmp_path: Path, pg_dsn: str
) -> None:
    keys = 4000
    files = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    _file(files[0], keys, 1, "gw-a")
    _file(files[1], keys, 2, "gw-b")
    cmd = [sys.executable, "-m", "agent", "ledger", "--dsn", pg_dsn]
    subprocess.run([*cmd, "migrate"], check=True, capture_output=True, timeout=60)
    procs = [
        subprocess.Popen(
            [*cmd, "import", str(f), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for f in files
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    results = [json.loads(line) for out, _ in outs for line in out.splitlines()]
    assert len(results) == 2 * keys
    decisions = [r["decision"] for r in results]
    assert decisions.count("inserted") == keys and decisions.count("duplicate") == keys
    with psycopg.connect(pg_dsn) as conn:
        per_key = conn.execute(
            "SELECT c.id, count(a.id), count(DISTINCT a.gateway) FROM canonical_event c"
            " JOIN arrival a ON a.canonical_id = c.id GROUP BY c.id"
        ).fetchall()
        total = conn.execute("SELECT count(*) FROM arrival").fetchone()
    assert len(per_key) == keys, "one canonical per key"
    assert all(n == 2 and gws == 2 for _, n, gws in per_key), "both arrivals kept, one per gateway"
    assert total == (2 * keys,)
