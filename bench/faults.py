"""The long form of the fault suite: prints one JSON line.

It only repeats the campaigns of `tests/faults/harness.py`; it must not define checks of its own.

    python bench/faults.py --kills 200            # kill -9 at random points, then the checker
    python bench/faults.py --stops 20             # SIGTERM during a drain, 20 times
    python bench/faults.py --kills 200 --stops 20 --seed 3
    python bench/faults.py --kills 0 --resume-kills 200   # kill -9, counters moving, ring of 3

The same campaigns as `tests/faults/` (`tests/faults/harness.py`, ending with the one checker
in `tests/faults/checker.py`), with more repetitions. Figures: kills, acknowledged (distinct
events seen committed in the store between kills), lost (acknowledged, or made by the
simulated controllers and neither stored nor inside a gap or overrun record of their source
and boot, at the end), inside_gaps (made, never stored, inside such a record: a controller's
ring overran while the agent was down), duplicates (keys with two canonicals),
integrity failures (`PRAGMA integrity_check` after each kill and at the end), canonical
without outbox rows, upstream distinct / missing / invented, and for the stops the worst time
to exit. The resume campaign (`--resume-kills`) kills the agent while the controllers change
all the time and keep a ring of 3 entries, and accounts for every transition made: canonical,
inside a gap or overrun record, or lost silently (the promise: 0). Exit code 0 when no
problem was found, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "faults"))

import harness  # noqa: E402

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)


async def main(kills: int, stops: int, seed: int, resume_kills: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if resume_kills:
        with tempfile.TemporaryDirectory(prefix="faults-resume-") as work:
            out["resume"] = await harness.resume_kill_campaign(Path(work), kills=resume_kills, seed=seed)
    if kills:
        with tempfile.TemporaryDirectory(prefix="faults-kill-") as work:
            out.update(await harness.kill_campaign(Path(work), kills=kills, seed=seed))
    if stops:
        with tempfile.TemporaryDirectory(prefix="faults-stop-") as work:
            figures = await harness.stop_campaign(Path(work), stops=stops, seed=seed)
        out["stop"] = figures
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=200, help="kill -9 rounds (0: none)")
    p.add_argument("--stops", type=int, default=0, help="SIGTERM-during-drain rounds (0: none)")
    p.add_argument("--resume-kills", type=int, default=0, help="kill -9 rounds, counters moving (0: none)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    result = asyncio.run(main(a.kills, a.stops, a.seed, a.resume_kills))
    print(json.dumps(result))
    problems = result.get("problems", []) + result.get("stop", {}).get("problems", [])
    resume = result.get("resume", {})
    if resume and (resume["lost_silently"] or resume["duplicates"] or resume["integrity"] != "ok"):
        problems.append("resume campaign: " + json.dumps(resume))
    sys.exit(1 if problems else 0)
