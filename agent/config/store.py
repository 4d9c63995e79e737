"""Where the store is and how it is opened: from --db, or from the config's `store:` section.

Units are parsed here (sizes like `512MB`). The full gateway configuration
(devices, upstreams) is validated by `agent.config.loader`; the store commands only
need this part, so they work on a gateway whose device maps are being edited.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from agent.core.errors import ConfigError

DEFAULT_CONFIG = "/etc/edge-agent/config.yaml"

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_size(text: str | int) -> int:
    """`512MB`, `2GiB`, `1048576` -> bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    m = _SIZE.fullmatch(str(text))
    if m is None:
        raise ConfigError(f"size {text!r} is not understood; write e.g. 512MB, 2GB or 1GiB")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower()])


def store_settings(
    *, db: str | None, config_path: str, synchronous: str | None, max_size: str | None
) -> tuple[str, str, int | None]:
    """(path, synchronous, max_bytes) of the store; --db and options win over the config."""
    section: dict[str, Any] = {}
    if db is None:
        cfg = Path(config_path)
        if not cfg.exists():
            raise ConfigError(
                f"no --db given and the config file {cfg} does not exist; "
                "pass --db PATH or -c FILE (a config with store.path)"
            )
        try:
            doc = yaml.safe_load(cfg.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{cfg}: not valid YAML: {exc}") from exc
        store = doc.get("store") if isinstance(doc, dict) else None
        if not isinstance(store, dict) or not isinstance(store.get("path"), str):
            raise ConfigError(f"{cfg}: store.path: missing (the SQLite file of the store)")
        section = store
        db = str(store["path"])
    sync = synchronous or str(section.get("synchronous", "FULL"))
    if sync.upper() not in ("FULL", "EXTRA", "NORMAL"):
        raise ConfigError(f"{config_path}: store.synchronous: must be FULL, EXTRA or NORMAL, not {sync!r}")
    size = max_size if max_size is not None else section.get("max_size")
    return db, sync.upper(), parse_size(size) if size is not None else None
