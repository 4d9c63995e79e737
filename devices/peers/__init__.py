"""Drivers for peer stacks no one here wrote (node-opcua, npm modbus-serial, libmodbus).

Each driver starts the peer as its own process from ``peers/`` (one npm lockfile in
``peers/node``) and speaks to it over stdin/stdout; :func:`node_missing` says why a Node.js peer
cannot run here, so a test can skip with the reason.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "peers" / "node"


def node_missing(package: str = "node-opcua-server") -> str | None:
    """Why a Node.js peer needing ``package`` cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed (the peer servers need Node.js)"
    if not (NODE_DIR / "node_modules" / package).is_dir():
        return f"{package} is not installed: npm ci --prefix peers/node"
    return None
