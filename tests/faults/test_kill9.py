"""kill -9 of the agent at random points during polling, recording and forwarding (short form).

The long form is `python bench/faults.py --kills 200`; both run `harness.kill_campaign`, which
ends with the one checker. Seeded: a failure names its seed and can be replayed.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

KILLS_IN_CI = 30  # the long form (>= 200) is `python bench/faults.py --kills 200`
SEED = 7

pytestmark = pytest.mark.timeout(150)


async def test_random_kill9_loses_no_committed_event_and_the_upstream_gets_exactly_the_store(
    harness: ModuleType, tmp_path: Path
) -> None:
    figures = await harness.kill_campaign(tmp_path, kills=KILLS_IN_CI, seed=SEED)
    text = json.dumps(figures)
    assert figures["problems"] == [], text
    assert figures["acknowledged"] > 0 and figures["made"] > 0, text  # the campaign did something
    assert figures["lost"] == 0 and figures["duplicates"] == 0, text
    assert figures["integrity_failures"] == 0 and figures["canonical_without_outbox"] == 0, text
    assert figures["upstream_distinct"] == figures["committed"], text
