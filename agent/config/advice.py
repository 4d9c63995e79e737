"""What the configuration allows but an operator should hear about (printed by `check`,
logged by `run` at start): today, a metrics endpoint reachable beyond this machine."""

from __future__ import annotations

import ipaddress

from agent.config.loader import Config


def config_warnings(cfg: Config) -> list[str]:
    """One text per warning, each naming the setting (empty when there is nothing to say)."""
    out: list[str] = []
    m = cfg.metrics
    if m is not None and m.listen and not m.reason and not is_loopback(m.listen):
        out.append(
            f"{cfg.file}: metrics.listen {m.listen!r} serves the metrics beyond this machine (no "
            "authentication); listen on 127.0.0.1, or say why in metrics.reason"
        )
    return out


def is_loopback(listen: str) -> bool:
    """True when ``host:port`` binds only loopback (an empty host means 127.0.0.1)."""
    host = listen.rpartition(":")[0].strip("[]")
    if host in ("", "localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything
