"""The `metrics:`, `web:` and `status_topic` settings of `ledger.yaml` (operator.md sections 1-3).

```yaml
metrics: {listen: "127.0.0.1:9109"}            # the Prometheus endpoint (off when absent)
web: {listen: "127.0.0.1:8089", token_file: /etc/edge-ledger/web-token, silent_after_s: 300}
status_topic: "+/status/+"                     # the gateways' status records (MQTT intake only)
```
`web:` mirrors `edge-agent ledger web`'s options; `ledger run` serves the page when it is set.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from agent.config.yaml_lines import _Section, _text

_LISTEN = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\s]+):(?P<port>\d{1,5})")
DEFAULT_STATUS_TOPIC = "+/status/+"


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class WebSettings:
    host: str
    port: int
    token_file: str | None = None
    silent_after_s: float = 300.0


def listen_of(v: Any) -> tuple[str, int]:
    m = _LISTEN.fullmatch(_text(v))
    if m is None or not 0 < int(m["port"]) < 65536:
        raise ValueError(f"{v!r} must be host:port with a port 1..65535, e.g. 127.0.0.1:9109")
    return m["host"].strip("[]"), int(m["port"])


def _seconds(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 1 <= v <= 30 * 86400:
        raise ValueError(f"{v!r} must be a number of seconds, 1..2592000")
    return float(v)


def metrics_section(s: _Section) -> MetricsSettings:
    host, port = s.get("listen", listen_of, ("127.0.0.1", 9109))
    s.finish()
    return MetricsSettings(host, port)


def web_section(s: _Section, check_files: bool) -> WebSettings:
    host, port = s.get("listen", listen_of, ("127.0.0.1", 8089))

    def readable(v: Any) -> str:
        text = _text(v)
        if check_files and not os.access(text, os.R_OK):
            raise ValueError(f"{text} cannot be read")
        return text

    out = WebSettings(
        host,
        port,
        token_file=s.get("token_file", readable, "") or None,
        silent_after_s=s.get("silent_after_s", _seconds, 300.0),
    )
    s.finish()
    return out


def views(top: _Section, check_files: bool) -> tuple[MetricsSettings | None, WebSettings | None, str]:
    """The three settings of a config's top level (absent sections: None)."""
    metrics = metrics_section(top.sub("metrics")) if top.has("metrics") else None
    web = web_section(top.sub("web"), check_files) if top.has("web") else None
    topic = top.get("status_topic", _text, DEFAULT_STATUS_TOPIC)
    return metrics, web, topic
