"""The running service's live state in a file in memory (tmpfs), named in the store once.

The service rewrites its live state every 2 seconds for `edge-agent status`. Kept in the store,
that cost a transaction each time: 2-3 pages of the WAL and again at the checkpoint, about 7 KB/s
of flash writes with nothing else happening (docs/performance.md, "Flash"). Live state is not
identity: nothing needs it after a power cut (a process that is gone is seen by its PID), so it
goes to a file in a runtime directory that lives in memory:

1. `$RUNTIME_DIRECTORY` (systemd's `RuntimeDirectory=edge-agent`: /run/edge-agent);
2. `$XDG_RUNTIME_DIR/edge-agent` (a login session's /run/user/<uid>);
3. `/dev/shm/edge-agent-<uid>`.

Only a directory on tmpfs (or ramfs) is taken; with none, the live state stays in the store's
`live_state` table as before. The store keeps the file's path (`store_meta` row `live_file`,
written once at start), so `status` finds it from the store alone, whoever runs it. The file is
replaced whole (written beside it, then renamed), so a reader never sees half of it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

META_KEY = "live_file"
MEMORY_FS = {"tmpfs", "ramfs"}


def filesystem_of(path: Path, mounts: str = "/proc/self/mounts") -> str | None:
    """The filesystem type of the mount holding `path` (the longest mount point above it)."""
    try:
        lines = Path(mounts).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    best, kind = "", None
    target = str(path.resolve())
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


def candidates(env: dict[str, str] | None = None) -> list[Path]:
    """The runtime directories to try, in order."""
    e = os.environ if env is None else env
    out: list[Path] = []
    if e.get("RUNTIME_DIRECTORY"):
        out.append(Path(e["RUNTIME_DIRECTORY"].split(":")[0]))
    if e.get("XDG_RUNTIME_DIR"):
        out.append(Path(e["XDG_RUNTIME_DIR"]) / "edge-agent")
    out.append(Path("/dev/shm") / f"edge-agent-{os.getuid()}")
    return out


def choose(
    store_id: str, env: dict[str, str] | None = None, mounts: str = "/proc/self/mounts"
) -> Path | None:
    """The live-state file of the store `store_id`, in the first usable in-memory directory."""
    for d in candidates(env):
        if d.parent.is_dir() and filesystem_of(d.parent, mounts) in MEMORY_FS:
            try:
                d.mkdir(mode=0o700, exist_ok=True)
            except OSError:
                continue
            if os.access(d, os.W_OK) and filesystem_of(d, mounts) in MEMORY_FS:
                return d / f"live-{store_id or 'store'}.json"
    return None


def write(path: Path, updated_at: str, state_json: str) -> None:
    """Replace the file with `{"updated_at", "state"}` (beside it, then renamed)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"updated_at": updated_at, "state": state_json}), encoding="utf-8")
    os.replace(tmp, path)


def read(path: str) -> tuple[str, str] | None:
    """(updated_at, state JSON) from the file, or None when it is gone (a reboot) or unreadable."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        return str(doc["updated_at"]), str(doc["state"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
