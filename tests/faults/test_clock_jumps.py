"""The gateway's wall clock jumps (+1 h, -1 h, back to 1970) while the agent runs, under
libfaketime (Debian `faketime`), with `FAKETIME_DONT_FAKE_MONOTONIC=1`: only the wall clock
moves, as when NTP or an operator sets the time; the timers must not care.

Shows: identity and dedup are unaffected (every transition is one canonical event under its
own key; a restart's re-read of the rings is `duplicate`, never a new event), the arrival
times are the faked ones (evidence only, so the fake did take effect), the poll cadence holds
in every phase, and the upstream gets exactly the committed set.

Timers in the code (reviewed for this test): every poll, backoff and drain timer uses the
event loop's clock or `time.monotonic()`; `datetime.now()` is used only for timestamps
(arrivalAt, outbox stamps, live state) and in the HTTP sink to turn a `Retry-After` HTTP-date
into seconds, which a wall-clock jump can skew (capped at one hour by `agent.core.retry`).
"""

from __future__ import annotations

import asyncio
import glob
import shutil
import sqlite3
import time
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.timeout(120)

LIBS = sorted(
    glob.glob("/usr/lib/*/faketime/libfaketime.so.1") + glob.glob("/usr/lib/faketime/libfaketime.so.1")
)
POLL_S = 0.1


def phases() -> list[tuple[str, str]]:
    back_to_1970 = int(time.time()) - 3600  # 1970-01-01T01:00Z
    return [("+1h", "+3600"), ("-1h", "-3600"), ("1970", f"-{back_to_1970}")]


@pytest.mark.skipif(
    not LIBS or shutil.which("faketime") is None,
    reason="libfaketime not installed (apt-get install faketime)",
)
async def test_wall_clock_jumps_change_neither_identity_dedup_nor_poll_cadence(
    harness: ModuleType, checker: ModuleType, tmp_path: Path
) -> None:
    offset_file = tmp_path / "faketime"
    offset_file.write_text("+0\n")
    env = {
        "LD_PRELOAD": LIBS[0],
        "FAKETIME_TIMESTAMP_FILE": str(offset_file),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    db = tmp_path / "events.db"
    async with harness.rig(tmp_path, devices=2, poll=f"{int(POLL_S * 1000)}ms") as (_plant, rx, agent, load):
        agent = harness.AgentProcess(agent.config, agent.log, env=env)
        try:
            await agent.start()
            await agent.started()
            years: set[str] = set()
            for name, offset in phases():
                offset_file.write_text(offset + "\n")
                await asyncio.sleep(0.3)
                before = await polls(agent)
                t0 = time.monotonic()
                for i in range(4):
                    await load.transition(f"PLC-{i % 2:02d}", ("Trip", "OverTemp")[i // 2])
                    await asyncio.sleep(0.3)
                await asyncio.sleep(2.0)
                rate = (await polls(agent) - before) / (time.monotonic() - t0) / 2  # per connection
                # A timer on the wall clock would stall polling for the whole jump (an hour, or 56
                # years): near zero. The poll count comes from the status the service writes every
                # 2 s, so the measured rate is coarse (a window of about 3 s can miss one write);
                # 10 % of the asked rate tells the two apart even on a loaded CI machine (not a
                # performance check: 27 % was seen under load).
                assert rate > 0.1 / POLL_S, (
                    f"{name}: {rate:.1f} polls/s per connection, asked {1 / POLL_S:.0f}"
                )
                await harness.eventually(lambda: load.made <= set(checker.committed_keys(db)), 10, name)
                years |= arrival_years(db)
            assert {"1970"} < years, years  # the fake took effect, and the 1970 arrivals are kept
            rc, _ = await agent.stop()  # a restart in 1970 re-reads the rings: duplicates only
            assert rc == 0
            await agent.start()
            await agent.started()
            await harness.eventually(lambda: duplicates(db) >= 1, 20, "the rings re-read after the restart")
            verdict = await harness.drain_and_check(agent, rx, db, load)
            con = sqlite3.connect(db)
            decisions = dict(con.execute("SELECT decision, count(*) FROM arrivals GROUP BY 1").fetchall())
            con.close()
        finally:
            await agent.close()
    assert verdict.ok, verdict.problems()
    assert verdict.committed == verdict.made == 12
    assert decisions.get("duplicate", 0) >= 1 and decisions.get("conflict", 0) == 0, decisions


async def polls(agent: object) -> int:
    """The polls the service's live state counts. Right after start the service may not have
    written its first live state yet (a loaded CI machine read `status` before it): wait for it."""
    for _ in range(100):
        status = await agent.status()  # type: ignore[attr-defined]
        if status.get("service") is not None:
            return sum(c["polls"] for c in status["service"]["connections"])
        await asyncio.sleep(0.1)
    raise AssertionError(f"the service wrote no live state within 10 s: {status}")


def duplicates(db: Path) -> int:
    """Arrivals decided `duplicate` so far (a fresh read-only look at the store)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return int(con.execute("SELECT count(*) FROM arrivals WHERE decision = 'duplicate'").fetchone()[0])
    finally:
        con.close()


def arrival_years(db: Path) -> set[str]:
    con = sqlite3.connect(db)
    try:
        return {r[0][:4] for r in con.execute("SELECT DISTINCT substr(arrival_at, 1, 4) FROM arrivals")}
    finally:
        con.close()
