"""The reference writer of a structured-mode event: the JSON encoder over a dict, the text the
fast `agent.sinks.encode._body` must equal (tests/sinks/test_encode.py)."""

from __future__ import annotations

from typing import Any

from agent.sinks.encode import _JSON, SPECVERSION, _Parts


def body_general(parts: _Parts, gateway: str, outbox: str, attempt: int, replayed: bool) -> str:
    head: dict[str, Any] = {
        "specversion": SPECVERSION,
        "id": parts.id,
        "source": parts.source,
        "type": parts.type,
    }
    if parts.time is not None:
        head["time"] = parts.time
    head["datacontenttype"] = "application/json"
    head.update(parts.ext)
    head["gateway"] = gateway
    head["outboxid"] = outbox
    head["attempt"] = attempt
    head["replayed"] = replayed
    text = _JSON.encode(head)
    return f'{text[:-1]},"data":{parts.data_json}}}'
