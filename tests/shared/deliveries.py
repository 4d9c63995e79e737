"""One parsed delivery of PUMP-07 for store tests: the shape the importer makes of a line."""

from __future__ import annotations

import json

from agent.core.contract import Delivery
from agent.core.intake import parse_delivery

AT = "2026-04-22T08:00:00.000Z"


def delivery(tid: str, source: str = "PUMP-07/Trip", *, at: str = AT) -> Delivery:
    obj = {"source": source, "transitionId": tid, "bootId": "B17", "payload": {"state": "Trip"}}
    got = parse_delivery(json.dumps(obj), arrival_at=at, receiver="test")
    assert isinstance(got, Delivery)
    return got
