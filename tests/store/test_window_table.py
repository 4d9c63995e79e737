"""Window keys (contract section 8) pinned as the dedup seed's table, over a real SQLite store.

`tests/data/window-cases.jsonl` holds observed changes of channels without a counter, one per
line with the path that read it; `window-cases.expected.json` the decision of each line and
which canonical event it lands on. The key is made exactly as a poller makes it
(`agent.core.window`, observed time = the controller's change time when given, else the read
time): same subject, type and window is one event; another subject, state, window or
generation is another; two real changes inside one window are one event and a read straddling a
boundary is two (the documented costs, pinned here). Run once line by line and once as one batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.config.units import parse_duration
from agent.core.basis import WINDOW_KEY, IdentityBasis
from agent.core.contract import Delivery
from agent.core.snapshot import make_delivery
from agent.core.window import window_key
from agent.store import report
from agent.store.store import Store

DATA = Path(__file__).parents[1] / "data"
LINES = [json.loads(x) for x in (DATA / "window-cases.jsonl").read_text().splitlines() if x.strip()]
EXPECTED = json.loads((DATA / "window-cases.expected.json").read_text())


def delivery(obs: dict[str, Any]) -> Delivery:
    device, channel = obs["source"].split("/", 1)
    observed = obs.get("sourceTimestamp") or obs["arrivalAt"]
    window_ms = round(parse_duration(obs["window"]) * 1000)
    return make_delivery(
        device=device,
        channel=channel,
        transition_id=window_key(obs["state"], observed, window_ms),
        boot_id=obs["bootId"],
        state=obs["state"],
        source_timestamp=obs.get("sourceTimestamp"),
        latched={},
        arrival_at=obs["arrivalAt"],
        receiver=obs["receiver"],
        live=True,
        raw={"case": obs["case"]},
        basis=IdentityBasis.WINDOW,
    )


@pytest.mark.parametrize("one_batch", [False, True], ids=["line by line", "one batch"])
async def test_the_window_cases_decide_as_the_table_says(tmp_path: Path, one_batch: bool) -> None:
    store = await Store.open(tmp_path / "window.db")
    try:
        items = [delivery(obs) for obs in LINES]
        if one_batch:
            outcomes = await store.record(items)
        else:
            outcomes = [oc for it in items for oc in await store.record([it])]
        events = {e["canonical_id"]: e async for e in report.events(store.db)}
        arrivals = [a async for a in report.arrivals(store.db)]
    finally:
        await store.close()
    names: dict[str, int] = {}
    for exp, oc, item, obs in zip(EXPECTED["decisions"], outcomes, items, LINES, strict=True):
        why = f"line {exp['line']}: {obs['case']}"
        assert oc.decision.value == exp["decision"], why
        assert WINDOW_KEY in oc.flags, why
        if "canonical" in exp:
            assert names.setdefault(exp["canonical"], oc.canonical_id) == oc.canonical_id, why
        if "transitionId" in exp:
            assert item.transition_id == exp["transitionId"], why
    assert len(set(names.values())) == len(names), "each named canonical is its own event"
    assert len(events) == EXPECTED["source_events"]
    for name, count in EXPECTED["arrivals_per_event"].items():
        assert 1 + events[names[name]]["duplicate_count"] == count, name
    assert {e["identity_basis"] for e in events.values()} == {"window"}
    assert all(e["flags"] == [WINDOW_KEY] for e in events.values())
    assert all(a["identity_basis"] == "window" and WINDOW_KEY in a["flags"] for a in arrivals)
