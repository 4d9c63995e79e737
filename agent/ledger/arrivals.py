"""One delivery as the ledger receives it: the parsed item and the evidence around it (pure data).

The evidence (`gateway`, `gateway_arrival_at`, `attempt`, `replayed`, `via`) never takes part
in identity; `received_at` is the ledger's clock, set per batch by the arbiter.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.core.contract import Delivery, Rejection

Via = Literal["mqtt", "http", "import"]
VIAS: tuple[Via, ...] = ("mqtt", "http", "import")
DEFAULT_IMPORT_GATEWAY = "import"


RecordKind = Literal["boot_observed", "gap", "anomaly", "identity_incomplete"]


@dataclass(frozen=True, slots=True)
class Received:
    """A gateway's own record that is not a transition: BootObserved, gap, anomaly, identity
    incomplete. Its identity is its CloudEvents (`source`, `id`), never mergeable with a transition.

    `fields` holds what its table needs (parsed and checked by `agent.ledger.cloudevents`).
    """

    kind: RecordKind
    source: str
    ce_id: str
    boot_id: str | None
    source_ts: str | None
    arrival_at: str
    raw: str | bytes
    line: int | None = None
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Arrival:
    """One delivery with its evidence. `item.arrival_at` is the gateway's `arrivalat`."""

    item: Delivery | Rejection | Received
    gateway: str
    via: Via
    attempt: int | None = None
    replayed: bool | None = None
    ce_id: str | None = None
    key: bytes | None = None  # the arrival key when the intake makes it (imports); see arrival_keys
    outbox: str | None = None  # the gateway's `outboxid` (`<store uuid>:<row id>`): what a receipt names


def from_import(item: Delivery | Rejection, default_gateway: str, file_digest: str | None = None) -> Arrival:
    """An import line: its own `gateway` field names the gateway when it is text, else the default
    (a rejected line too, when it is a JSON object that names one: the fleet never lists a gateway
    `import` for a line that said where it came from). With the file's SHA-256 (hex), its arrival
    key is (digest, line): importing the same file again adds no second arrival of a line."""
    gateway = default_gateway
    named = item.evidence.get("gateway") if isinstance(item, Delivery) else _named_gateway(item.raw)
    if isinstance(named, str) and named:
        gateway = named
    key = None if file_digest is None else import_key(file_digest, item.line)
    return Arrival(item, gateway, "import", key=key)


def _named_gateway(raw: str | bytes) -> object:
    """The `gateway` a rejected line names, when it is a JSON object (None when it is not)."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return doc.get("gateway") if isinstance(doc, dict) else None


def import_key(file_digest: str, line: int | None) -> bytes:
    """The arrival key of an import line: the file's SHA-256 (hex) and the line number."""
    return hashlib.sha256(f"import\n{file_digest}\n{'' if line is None else line}".encode()).digest()


def file_digest(path: str) -> str:
    """The SHA-256 (hex) of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
