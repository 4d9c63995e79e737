"""What the configuration allows but an operator should hear about: a metrics endpoint reachable
beyond this machine without a stated reason. The loader adds these to ``Config.warnings``,
which `check` prints and `run` says once per start."""

from __future__ import annotations

import ipaddress
from typing import Protocol


class MetricsSettings(Protocol):
    @property
    def listen(self) -> str | None: ...
    @property
    def reason(self) -> str | None: ...


def metrics_warnings(metrics: MetricsSettings | None, file: str) -> list[str]:
    """One text per warning, each naming the setting (empty when there is nothing to say)."""
    if metrics is None or not metrics.listen or metrics.reason or is_loopback(metrics.listen):
        return []
    return [
        f"{file}: metrics.listen {metrics.listen!r} serves the metrics beyond this machine (no "
        "authentication); listen on 127.0.0.1, or say why in metrics.reason"
    ]


def is_loopback(listen: str) -> bool:
    """True when ``host:port`` binds only loopback (an empty host means 127.0.0.1)."""
    host = listen.rpartition(":")[0].strip("[]")
    if host in ("", "localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything
