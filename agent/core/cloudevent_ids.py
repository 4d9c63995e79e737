"""CloudEvents names of the contract (docs/contract.md): the event types, `source` and `id` of
each record (percent-encoded parts, so no two keys meet), and the HTTP `Idempotency-Key`. Pure."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import quote

from agent.core.contract import ContractError, Key, channel_of, device_of

TRANSITION_TYPE = "io.edgeagent.transition"
BOOT_OBSERVED_TYPE = "io.edgeagent.boot_observed"
GAP_TYPE = "io.edgeagent.gap"
ANOMALY_TYPE = "io.edgeagent.anomaly"
IDENTITY_INCOMPLETE_TYPE = "io.edgeagent.identity_incomplete"

_SITE = re.compile(r"[A-Za-z0-9._~:/-]+")


_UNRESERVED = re.compile(r"[A-Za-z0-9._~-]*")


def pct(text: str) -> str:
    """Percent-encode every UTF-8 byte outside `A-Z a-z 0-9 - . _ ~`."""
    if _UNRESERVED.fullmatch(text):
        return text  # nothing to encode (the common case: ids and names of plain letters and digits)
    return quote(text, safe="", encoding="utf-8")


def check_site(site: str) -> str:
    if not _SITE.fullmatch(site):
        raise ContractError(f"site {site!r} must match [A-Za-z0-9._~:/-]+")
    return site


def ce_source(site: str, source: str) -> str:
    """CloudEvents `source` of a transition: `<site>/pct(device)/pct(channel)`.

    A source without `/` is a device with no channel: `<site>/pct(device)`,
    so that `dev` and `dev/` never meet.
    """
    channel = channel_of(source)
    base = f"{check_site(site)}/{pct(device_of(source))}"
    return base if channel is None else f"{base}/{pct(channel)}"


def ce_device_source(site: str, device: str) -> str:
    return f"{check_site(site)}/{pct(device)}"


def ce_transition_id(key: Key) -> str:
    """`pct(bootId):pct(transitionId)`; the `:` inside either part is encoded, so it is unambiguous."""
    return f"{pct(key.boot_id)}:{pct(key.transition_id)}"


def ce_anomaly_id(kind: str, boot_id: str, first: str, last: str) -> str:
    """Id of a gap/wrap/reset/overrun record: `kind:pct(boot):pct(first):pct(last)`."""
    return f"{kind}:{pct(boot_id)}:{pct(first)}:{pct(last)}"


def idempotency_key(ce_source_text: str, ce_id: str) -> str:
    """HTTP `Idempotency-Key`: lowercase hex SHA-256 of source + newline + id."""
    return hashlib.sha256(f"{ce_source_text}\n{ce_id}".encode()).hexdigest()
