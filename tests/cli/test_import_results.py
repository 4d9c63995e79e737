"""`import --json` result lines: written directly, and exactly what `json.dumps` would write."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from agent.cli.records import _json_results
from agent.core.decide import Decision, Outcome


def reference(line: int, oc: Outcome) -> str:
    obj = {
        "line": line,
        "decision": oc.decision.value,
        "canonical_id": oc.canonical_id,
        "duplicate_of": oc.duplicate_of,
        "reason": oc.reason,
        "flags": list(oc.flags),
    }
    return json.dumps(obj) + "\n"


ids = st.none() | st.integers(min_value=0, max_value=2**63 - 1)


@given(
    st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=10**9),
            st.builds(
                Outcome,
                st.sampled_from(list(Decision)),
                ids,
                ids,
                st.none() | st.text(),
                st.lists(st.text(), max_size=3).map(tuple),
            ),
        ),
        max_size=5,
    )
)
def test_result_lines_are_exactly_the_json_dumps_form(rows: list[tuple[int, Outcome]]) -> None:
    lines = [line for line, _ in rows]
    outcomes = [oc for _, oc in rows]
    assert _json_results(lines, outcomes) == "".join(reference(line, oc) for line, oc in rows)
