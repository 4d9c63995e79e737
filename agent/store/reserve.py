"""The store's reserve: room kept for the moment the store fills (`store.reserve`, 4 MiB default).

Two forms, one per way a store fills:
* The disk fills: a file next to the store (`<store>.reserve`) holds `reserve` bytes of real
  blocks (written, not sparse). When a write fails because the disk is full, the file is
  deleted: the space it gives back lets the live state, the forwarders' attempt counts and
  delivered-marks, and at SIGTERM the observations still held, commit. The recorder does not
  write new observations into it (`disk_room` says whether the space freed is more than the
  reserve); the file is made again once there is room for it.
* The quota (`store.max_size`) is reached: the database may grow to `max_size - reserve`
  (`Reserve.database_quota`); at SIGTERM the quota is opened to the full `max_size` so that
  what is held still commits.

Only files and `os.statvfs`; the quota itself is set through the store's writer.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

CHUNK = 1024 * 1024


def fs_free_bytes(store_path: str) -> int:
    """Bytes this user may still write on the store's filesystem."""
    st = os.statvfs(Path(store_path).resolve().parent)
    return st.f_bavail * st.f_frsize


def reserve_given_away(store_path: str, size: int) -> int:
    """Bytes of a configured reserve of `size` that its file does not hold now (read only: 0 when
    the reserve is in place). Free space that a released reserve left on the filesystem is kept
    for the last commits, so `status` does not count it as room."""
    if size <= 0:
        return 0
    try:
        held = Path(f"{store_path}.reserve").stat().st_blocks * 512
    except OSError:
        held = 0
    return max(0, size - held)


class Reserve:
    """The reserve file of one store; `size` 0 keeps none."""

    def __init__(self, store_path: str, size: int, max_size: int | None = None) -> None:
        self.store_path = store_path
        self.file = Path(f"{store_path}.reserve")
        self.size = size
        self.max_size = max_size
        self.released = False

    @property
    def database_quota(self) -> int | None:
        """The quota the database itself may use while the reserve is kept."""
        return None if self.max_size is None else self.max_size - self.size

    def ensure(self) -> bool:
        """Make the reserve file (real blocks, synced) unless it is there; False when there is no
        room for it (a partial file is removed: it would only take space)."""
        if self.size <= 0:
            return True
        try:
            if self.file.exists() and self.file.stat().st_blocks * 512 >= self.size:
                self.released = False
                return True
            fd = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                block = b"\0" * CHUNK
                left = self.size
                while left > 0:
                    left -= os.write(fd, block[: min(left, CHUNK)])
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            self.file.unlink(missing_ok=True)
            log.warning("no room for the store reserve (%d bytes at %s): %s", self.size, self.file, exc)
            self.released = True
            return False
        self.released = False
        return True

    def release(self) -> int:
        """Delete the reserve file; the bytes given back (0 when there was none)."""
        try:
            freed = self.file.stat().st_blocks * 512
            self.file.unlink()
        except FileNotFoundError:
            freed = 0
        self.released = True
        return freed

    def disk_room(self) -> bool:
        """True unless the reserve was released and the disk has no more room than the reserve."""
        return not self.released or fs_free_bytes(self.store_path) > 2 * max(self.size, CHUNK)
