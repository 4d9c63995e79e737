"""Typed settings of one upstream (one entry of the config's `upstreams:` list).

Plain frozen dataclasses with defaults, built by the YAML loader (`agent.config.loader`) and by
tests; the sinks read them. No YAML and no secrets here: passwords and tokens are read from
files (e.g. systemd credentials under `$CREDENTIALS_DIRECTORY`) when a sink connects, never
from the YAML. `problems()` lists what is wrong as `field: message` texts (empty when fine), so
that the loader can collect every error with its file and line before the first delivery.

The keys, an example and the topic placeholders: docs/configuration.md ("upstreams").
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

Backfill = Literal["none", "all"]
MqttProtocol = Literal["3.1.1", "5"]

BACKFILLS: tuple[str, ...] = ("none", "all")
MQTT_PROTOCOLS: tuple[str, ...] = ("3.1.1", "5")
TOPIC_FIELDS: frozenset[str] = frozenset({"site", "device", "channel", "type"})
DEFAULT_TOPIC = "{site}/events/{device}/{channel}"


@dataclass(frozen=True, slots=True)
class Backoff:
    """Capped exponential backoff after a failed delivery: `initial_s * 2**n`, at most `max_s`, jittered."""

    initial_s: float = 0.5
    max_s: float = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class MqttClientSettings:
    """How the agent signs in to a broker: what `mqtt:` and `sparkplug:` upstreams share (keywords only).

    ca_file:       PEM CA to pin for TLS (default: the system's trust store).
    cert_file / key_file: client certificate for mutual TLS (both or neither).
    username:      MQTT user name (not a secret).
    password_file: file whose content (trailing newline stripped) is the password.
    client_id:     MQTT client id; default `edge-agent-<gateway>-<name>-<pid>`
                   (two connections with one id knock each other off).
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    username: str | None = None
    password_file: str | None = None
    client_id: str | None = None

    def login_problems(self) -> list[str]:
        if self.password_file is not None and self.username is None:
            return ["password_file: needs a username"]
        return []


@dataclass(frozen=True, slots=True)
class MqttUpstream(MqttClientSettings):
    """An MQTT broker. QoS 1: an event counts as delivered only on its PUBACK.

    url:           `mqtt://host[:1883]` or `mqtts://host[:8883]` (TLS).
    topic:         template with `{site}`, `{device}`, `{channel}`, `{type}`.
    qos:           1 (the only level with an acknowledgement; 0 is refused).
    protocol:      "3.1.1" (default; a refusing broker disconnects) or "5"
                   (PUBACK reason codes >= 0x80 mark the event rejected).
    ca_file, cert_file, key_file, username, password_file, client_id: MqttClientSettings.
    batch_size:    events per MQTT message: 1 (default) sends one CloudEvent per
                   message; more sends a JSON array (`application/cloudevents-batch+json`).
    read_size:     outbox rows read and settled per database transaction.
    max_inflight:  QoS 1 messages awaiting PUBACK at once.
    connect_timeout_s / ack_timeout_s / keepalive_s: network limits.
    backfill:      "none" (events recorded from now on) or "all" (everything stored).
    receipts:      true when the reader is `edge-agent ledger` (docs/upstream.md, "Receipts"): a
                   PUBACK only says the broker has the event, so a row stays `sent` until the
                   ledger's receipt on `receipts/<gateway>/<store id>` says it committed it, and is
                   sent again (same id, next attempt) when none comes within `receipt_timeout`,
                   when the connection was new, and after a restart. Off (the default): a PUBACK
                   is delivery, which is all an MQTT consumer that is not the ledger can give.
    receipt_timeout_s: how long a `sent` row waits for its receipt before it is sent again.
    """

    name: str
    url: str
    topic: str = DEFAULT_TOPIC
    qos: int = 1
    protocol: MqttProtocol = "3.1.1"
    batch_size: int = 1
    read_size: int = 500
    max_inflight: int = 100
    connect_timeout_s: float = 10.0
    ack_timeout_s: float = 10.0
    keepalive_s: float = 30.0
    backoff: Backoff = Backoff()
    backfill: Backfill = "none"
    receipts: bool = False
    receipt_timeout_s: float = 60.0

    def problems(self) -> list[str]:
        out = _common_problems(self.name, self.batch_size, self.read_size, self.backfill, self.backoff)
        out += tls_problems(self.cert_file, self.key_file) + url_problems(self.url)
        out += mqtt_url_problems(self.url)
        if not (1 <= self.keepalive_s <= 65535 and float(self.keepalive_s).is_integer()):
            out.append(
                f"keepalive: {self.keepalive_s:g} s must be whole seconds, 1s..65535s (MQTT counts seconds)"
            )
        if self.receipt_timeout_s < 1:
            out.append("receipt_timeout: must be at least 1 s (the ledger gathers and commits first)")
        if self.qos != 1:
            out.append(f"qos: {self.qos} is not supported; only QoS 1 is acknowledged (PUBACK)")
        if self.protocol not in MQTT_PROTOCOLS:
            out.append(f"protocol: {self.protocol!r} must be one of {', '.join(MQTT_PROTOCOLS)}")
        out += topic_problems(self.topic)
        if self.max_inflight < 1:
            out.append("max_inflight: must be at least 1")
        return out + self.login_problems()


@dataclass(frozen=True, slots=True)
class HttpUpstream:
    """An HTTP(S) endpoint taking `POST` of `application/cloudevents-batch+json`.

    2xx = delivered; 408/425/429/5xx, timeouts and endpoint-level refusals
    (401, 403, 404, 405, 407, 415, 421) = retry later (`Retry-After` honoured);
    any other 4xx = rejected (dead letter), after the batch was split down to
    the one event the endpoint refuses.

    url:          full endpoint URL, `http://` or `https://`.
    ca_file:      PEM CA to pin for TLS (default: the system's trust store).
    cert_file / key_file: client certificate for mutual TLS.
    token_file:   file holding a bearer token (re-read on every connect).
    batch_size:   events per request.
    read_size:    outbox rows read and settled per database transaction (4000: two
                  transactions per 4000 events keep a drain above 20,000 events/s
                  while memory holds one read of a few MB).
    connect_timeout_s / request_timeout_s: network limits.
    backfill:     "none" or "all".
    """

    name: str
    url: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    token_file: str | None = None
    batch_size: int = 500
    read_size: int = 4000
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    backoff: Backoff = Backoff()
    backfill: Backfill = "none"

    def problems(self) -> list[str]:
        out = _common_problems(self.name, self.batch_size, self.read_size, self.backfill, self.backoff)
        out += tls_problems(self.cert_file, self.key_file) + url_problems(self.url)
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            out.append(f"url: {self.url!r} must look like https://host/path")
        if self.connect_timeout_s <= 0 or self.request_timeout_s <= 0:
            out.append("timeouts: must be positive")
        return out


Upstream = MqttUpstream | HttpUpstream


def topic_problems(topic: str) -> list[str]:
    """Problems of a topic template: unknown placeholders, MQTT wildcards, empty text."""
    if not topic:
        return ["topic: must not be empty"]
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(topic) if f is not None}
    except ValueError as exc:
        return [f"topic: {topic!r} is not a valid template ({exc})"]
    out = [
        f"topic: unknown placeholder {{{n}}}; use {{site}} {{device}} {{channel}} {{type}}"
        for n in sorted(names - TOPIC_FIELDS)
    ]
    if "+" in topic or "#" in topic:
        out.append("topic: MQTT wildcards + and # cannot be published to")
    return out


def _common_problems(name: str, batch: int, read: int, backfill: str, backoff: Backoff) -> list[str]:
    out = []
    if not name or "/" in name:
        out.append(f"name: {name!r} must be a non-empty name without '/'")
    if batch < 1:
        out.append("batch_size: must be at least 1")
    if read < batch:
        out.append("read_size: must be at least batch_size")
    if backfill not in BACKFILLS:
        out.append(f"backfill: {backfill!r} must be none or all")
    if backoff.initial_s <= 0 or backoff.max_s < backoff.initial_s:
        out.append("backoff: initial_s must be positive and max_s at least initial_s")
    return out


def url_problems(url: str) -> list[str]:
    """A secret in a URL would sit in the config and in every log line that names the upstream."""
    if urlsplit(url).password is not None:
        return ["url: must not carry a password; use password_file / token_file"]
    return []


def mqtt_url_problems(url: str) -> list[str]:
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
        return [f"url: {url!r} must look like mqtt://host:1883 or mqtts://host:8883"]
    return []


def tls_problems(cert: str | None, key: str | None) -> list[str]:
    if (cert is None) != (key is None):
        return ["cert_file/key_file: give both for a client certificate, or neither"]
    return []
