"""HTTP sink: `POST` of `application/cloudevents-batch+json` with aiohttp.
Never raises a network error (they come back as `retry`) and never touches the store.

One request per batch of `batch_size` events, sent one after the other (the
order of first arrival upstream is the outbox order). 2xx = every event of
the batch delivered. A batch refused with a 4xx that is about its content is
split in halves until the one event the endpoint refuses is found, so one
poison event is dead-lettered and the rest of the backlog flows.

`Idempotency-Key`: for a single event it is exactly the contract's key,
lowercase hex SHA-256 of `source` + newline + `id`. A batch carries the
SHA-256 of its events' keys joined by newlines: the same batch sent again has
the same key, and two different batches never share one (a key shared by
[A, B] and [A, B, C] would let a key-deduplicating receiver drop C). Inside
the body every event still carries its own (source, id).

The bearer token is read from `token_file` for every request, so a rotated
credential is picked up without a restart.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import aiohttp

from agent.config.upstreams import HttpUpstream
from agent.core.cloudevent_ids import idempotency_key
from agent.core.redact import mask_url, mask_url_text
from agent.core.send_outcome import SendOutcome, Verdict, all_delivered, classify_http, needs_split, retry
from agent.sinks.encode import BATCH_CONTENT_TYPE, Event, batch_body
from agent.sinks.tls import read_secret, tls_context

log = logging.getLogger(__name__)


STATUS_CONTENT_TYPE = "application/vnd.edgeagent.status+json"


def batch_idempotency_key(events: Sequence[Event]) -> str:
    if len(events) == 1:
        return events[0].idempotency_key
    key = idempotency_key  # each event's key, the contract's (as `Event.idempotency_key`)
    return hashlib.sha256("\n".join([key(e.ce_source, e.ce_id) for e in events]).encode()).hexdigest()


class HttpSink:
    """A `Sink` posting CloudEvents batches to one HTTP(S) endpoint."""

    overlapping = False  # one request after the other: the order of first arrival is the outbox order

    def __init__(
        self, settings: HttpUpstream, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.name = settings.name
        self.settings = settings
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None

    async def publish(self, events: Sequence[Event]) -> list[SendOutcome]:
        out: list[SendOutcome] = []
        size = self.settings.batch_size
        for start in range(0, len(events), size):
            outcomes = await self._post_split(events[start : start + size])
            out.extend(outcomes)
            if all_delivered(outcomes):
                continue
            failed = next((o for o in outcomes if o.verdict is Verdict.RETRY), None)
            if failed is not None:
                # Keep order: nothing after a batch that may not have arrived is sent now.
                out.extend([failed] * (len(events) - len(out)))
                break
        return out

    async def publish_status(self, gateway: str, body: bytes) -> bool:
        """The gateway's status record, POSTed to the upstream's URL as
        `application/vnd.edgeagent.status+json` (the ledger keeps it apart from the events)."""
        s = self.settings
        headers = {"Content-Type": STATUS_CONTENT_TYPE}
        if s.token_file is not None:
            headers["Authorization"] = f"Bearer {read_secret(s.token_file)}"
        async with self._open().post(s.url, data=body, headers=headers) as resp:
            return 200 <= resp.status < 300

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def _post_split(self, events: Sequence[Event]) -> list[SendOutcome]:
        oc = await self._post(events)
        if not needs_split(oc, len(events)):
            return [oc] * len(events)
        half = len(events) // 2
        left = await self._post_split(events[:half])
        failed = next((o for o in left if o.verdict is Verdict.RETRY), None)
        if failed is not None:
            return left + [failed] * (len(events) - half)
        return left + await self._post_split(events[half:])

    async def _post(self, events: Sequence[Event]) -> SendOutcome:
        s = self.settings
        headers = {"Content-Type": BATCH_CONTENT_TYPE, "Idempotency-Key": batch_idempotency_key(events)}
        try:
            if s.token_file is not None:
                headers["Authorization"] = f"Bearer {read_secret(s.token_file)}"
            session = self._open()
            async with session.post(s.url, data=batch_body(list(events)), headers=headers) as resp:
                detail = "" if 200 <= resp.status < 300 else (await resp.text(errors="replace"))[:200].strip()
                return classify_http(resp.status, resp.headers.get("Retry-After"), self._clock(), detail)
        except TimeoutError:
            return retry(f"{mask_url(s.url)}: no response within {s.request_timeout_s:g} s")
        except aiohttp.ClientError as exc:
            return retry(f"{mask_url(s.url)}: {type(exc).__name__}: {mask_url_text(str(exc), s.url)}")
        except OSError as exc:  # token file missing or unreadable, CA file problems
            return retry(f"{mask_url(s.url)}: {exc}")

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            s = self.settings
            ctx = tls_context(s.ca_file, s.cert_file, s.key_file) if s.url.startswith("https:") else None
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=s.request_timeout_s, connect=s.connect_timeout_s),
                connector=aiohttp.TCPConnector(ssl=ctx if ctx is not None else True, limit=4),
            )
        return self._session
