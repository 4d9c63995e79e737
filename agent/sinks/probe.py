"""`check --probe` of one upstream: can the agent reach it, speak TLS to it and log in, without
delivering an event.

MQTT: one CONNECT with the configured user, password file, TLS settings and protocol version
(through `MqttSink`'s own connect), then DISCONNECT; nothing is published. The client id is the
configured one with ``-probe`` appended, so a probe beside the running service does not knock
the service's session off. HTTP: one POST of an empty batch (``[]``, the batch content type,
the bearer token) to the configured URL; no event is in it. 2xx means reachable, TLS and token
accepted; 401/403 mean the token was refused; 404, 5xx and network or TLS errors fail; any other
answer means the receiver was reached and did not refuse the token, and is shown as it is.
URLs are masked (`agent.core.redact`).
"""

from __future__ import annotations

import dataclasses

import aiohttp
import aiomqtt

from agent.config.upstreams import HttpUpstream, MqttUpstream, Upstream
from agent.core.redact import mask_url, mask_url_text
from agent.sinks.encode import BATCH_CONTENT_TYPE
from agent.sinks.mqtt import MqttSink
from agent.sinks.tls import read_secret, tls_context


async def probe_upstream(up: Upstream, *, site: str, gateway: str) -> tuple[bool, str]:
    """(reached and accepted, one line saying what happened)."""
    if isinstance(up, MqttUpstream):
        return await _probe_mqtt(up, site, gateway)
    return await _probe_http(up)


async def _probe_mqtt(up: MqttUpstream, site: str, gateway: str) -> tuple[bool, str]:
    base = up.client_id or f"edge-agent-{gateway}-{up.name}"
    sink = MqttSink(dataclasses.replace(up, client_id=f"{base}-probe"), site=site, gateway=gateway)
    where = f"upstream {up.name} ({mask_url(up.url)})"
    try:
        client = await sink._connect()
    except (aiomqtt.MqttError, OSError, TimeoutError) as exc:
        return False, f"{where}: MQTT CONNECT failed: {mask_url_text(str(exc), up.url) or 'timed out'}"
    sink._client = client
    await sink.close()
    login = f" as {up.username}" if up.username else ""
    tls = ", TLS" if up.url.startswith("mqtts:") else ""
    return True, f"{where}: MQTT {up.protocol} CONNECT accepted{login}{tls}; nothing published"


async def _probe_http(up: HttpUpstream) -> tuple[bool, str]:
    where = f"upstream {up.name} ({mask_url(up.url)})"
    headers = {"Content-Type": BATCH_CONTENT_TYPE}
    try:
        if up.token_file is not None:
            headers["Authorization"] = f"Bearer {read_secret(up.token_file)}"
        ctx = tls_context(up.ca_file, up.cert_file, up.key_file) if up.url.startswith("https:") else None
        timeout = aiohttp.ClientTimeout(total=up.request_timeout_s, connect=up.connect_timeout_s)
        connector = aiohttp.TCPConnector(ssl=ctx if ctx is not None else True)
        async with (
            aiohttp.ClientSession(timeout=timeout, connector=connector) as session,
            session.post(up.url, data=b"[]", headers=headers) as resp,
        ):
            status = resp.status
    except TimeoutError:
        return False, f"{where}: no answer within {up.request_timeout_s:g} s"
    except (aiohttp.ClientError, OSError) as exc:
        return False, f"{where}: {type(exc).__name__}: {mask_url_text(str(exc), up.url)}"
    token = "token " if up.token_file else ""
    if 200 <= status < 300:
        return True, f"{where}: HTTP {status} to an empty batch: reachable, {token}accepted; no event sent"
    if status in (401, 403):
        return False, f"{where}: HTTP {status}: the receiver refused the {token or 'missing token'}".rstrip()
    if status == 404 or status >= 500:
        return False, f"{where}: HTTP {status} to an empty batch"
    return True, f"{where}: HTTP {status} to an empty batch: reachable, {token}not refused; no event sent"
