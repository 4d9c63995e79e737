"""A rejected `ledger import` line keeps the gateway it names (issue 36): the fleet never lists a
gateway `import` for a line that said where it came from."""

from __future__ import annotations

import json

import pytest

from agent.core.contract import Rejection
from agent.ledger.arrivals import from_import


@pytest.mark.parametrize(
    ("raw", "gateway"),
    [
        (json.dumps({"gateway": "gw-7", "source": "PUMP-07/Trip"}), "gw-7"),  # rejected: no transitionId
        (json.dumps({"gateway": "gw-7"}).encode(), "gw-7"),
        (json.dumps({"gateway": ""}), "import"),
        (json.dumps({"gateway": 7}), "import"),
        (json.dumps(["gw-7"]), "import"),
        ("not json {", "import"),
        (b"\xff\xfe", "import"),
        ("[" * 100_000, "import"),
    ],
)
def test_a_rejected_line_keeps_the_gateway_it_names(raw: str | bytes, gateway: str) -> None:
    arrival = from_import(Rejection(raw, "a reason", "2026-12-06T00:00:00.000Z", "import", 3), "import")
    assert arrival.gateway == gateway and arrival.via == "import"
