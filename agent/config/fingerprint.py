"""The configuration's fingerprint: which files are in force, told apart by their content.

`fingerprint(cfg)` is the SHA-256 of the configuration file and of every file its devices came from
(`devices.d`), each as its path and bytes, in path order; the first 12 hex digits are shown
(`edge-agent status`, the metric `edge_agent_config_info`). Comments and blank lines count: it says
whether the files changed, not whether their meaning did (`agent.config.changes` says that).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from agent.config.loader import Config

SHOWN_HEX_DIGITS = 12


def fingerprint(cfg: Config) -> str:
    """The gateway's configuration: its file and every file its devices came from."""
    return files_fingerprint({cfg.file, *(d.file for d in cfg.devices if d.file)})


def files_fingerprint(names: Iterable[str]) -> str:
    """The SHA-256 of the files, each as its path and bytes, in path order; 12 hex digits (the
    ledger's `ledger.yaml` is one file)."""
    digest = hashlib.sha256()
    for name in sorted(set(names) - {""}):
        try:
            data = Path(name).read_bytes()
        except OSError as exc:  # read a moment ago by the loader; say it rather than fail
            data = f"unreadable: {exc.strerror}".encode()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:SHOWN_HEX_DIGITS]
