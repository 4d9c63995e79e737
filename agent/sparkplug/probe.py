"""`check --probe` of a Sparkplug upstream: connect, and with a primary host read its STATE.
Publishes nothing: no Will either (a probe that died would otherwise announce an NDEATH)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from urllib.parse import urlsplit

import aiomqtt

from agent.config.sparkplug import SparkplugUpstream
from agent.core.redact import mask_url, mask_url_text
from agent.sinks.tls import read_secret, tls_context
from agent.sparkplug.host import HostState, state_topic, state_topic_v22

STATE_WAIT_S = 2.0  # a host's STATE is retained: it comes right after the subscription


async def probe_sparkplug(up: SparkplugUpstream, *, gateway: str) -> tuple[bool, str]:
    """(reached, one line saying what happened)."""
    url = urlsplit(up.url)
    secure = url.scheme == "mqtts"
    where = f"upstream {up.name} ({mask_url(up.url)}, Sparkplug {up.group_id}/{up.node_id(gateway)})"
    try:
        client = aiomqtt.Client(
            url.hostname or "localhost",
            url.port or (8883 if secure else 1883),
            username=up.username,
            password=read_secret(up.password_file) if up.password_file else None,
            identifier=f"{up.client_id or f'edge-agent-{gateway}-{up.name}'}-probe-{os.getpid()}",
            clean_session=True,
            timeout=up.connect_timeout_s,
            tls_context=tls_context(up.ca_file, up.cert_file, up.key_file) if secure else None,
        )
        async with client:
            if not up.primary_host_id:
                return True, f"{where}: MQTT CONNECT accepted; no primary host configured; nothing published"
            host = HostState()
            await client.subscribe(state_topic(up.primary_host_id), qos=1)
            if up.state_v22:
                await client.subscribe(state_topic_v22(up.primary_host_id), qos=1)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STATE_WAIT_S):
                    async for msg in client.messages:
                        payload = msg.payload if isinstance(msg.payload, bytes) else str(msg.payload).encode()
                        host.seen(msg.topic.value, payload, v22=up.state_v22)
                        if host.online is not None:
                            break
    except (aiomqtt.MqttError, OSError, TimeoutError) as exc:
        return False, f"{where}: MQTT CONNECT failed: {mask_url_text(str(exc), up.url) or 'timed out'}"
    said = {True: "online", False: "OFFLINE", None: f"not seen within {STATE_WAIT_S:g} s"}[host.online]
    text = f"{where}: MQTT CONNECT accepted; primary host {up.primary_host_id} {said}; nothing published"
    return True, text
