"""Finding damage in a store's WAL before SQLite opens it (SQLite itself drops it silently).

SQLite checks each WAL frame's checksum when it recovers the WAL and stops at the first frame
that fails: every later commit is dropped without an error, and `PRAGMA quick_check` cannot
see it (those pages are no longer part of the database). A crash in the middle of a commit
leaves the same kind of bad frame at the very end, which is harmless (that commit never
returned). So the WAL counts as damaged only when frames of the current generation (same
salts) that end a transaction (a commit frame) follow the first bad frame: those commits had
returned, and SQLite will not apply them.

Format (https://www.sqlite.org/fileformat2.html#walformat): a 32-byte header (magic, version,
page size, checkpoint sequence, salt-1, salt-2, checksum), then frames of a 24-byte header
(page number, database size after commit or 0, salt-1, salt-2, checksum) and one page. The
checksum runs over the header and every frame in order; the magic's last bit says whether its
32-bit words are big-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC_LE, MAGIC_BE = 0x377F0682, 0x377F0683
HEADER, FRAME_HEADER = 32, 24
MASK = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class WalDamage:
    """Commits that SQLite will not apply from a damaged WAL."""

    first_bad_frame: int  # 1-based
    dropped_frames: int
    dropped_commits: int
    header_damaged: bool = False

    def describe(self) -> str:
        if self.header_damaged:
            return "the WAL header is damaged, so SQLite ignores the whole WAL"
        return (
            f"frame {self.first_bad_frame} of the WAL is damaged, so SQLite drops it and everything after "
            f"it: {self.dropped_commits} committed transactions ({self.dropped_frames} pages) are missing "
            "from the store"
        )


def _checksum(data: bytes, big: bool, s0: int, s1: int) -> tuple[int, int]:
    words = struct.unpack(f"{'>' if big else '<'}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & MASK
        s1 = (s1 + words[i + 1] + s0) & MASK
    return s0, s1


def wal_damage(wal: str | Path) -> WalDamage | None:
    """The damage of the WAL at `wal`, or None when it is absent, intact or only torn at its end."""
    try:
        data = Path(wal).read_bytes()
    except OSError:
        return None
    if len(data) < HEADER:
        return None
    magic, _version, page_size = struct.unpack(">III", data[:12])
    if magic not in (MAGIC_LE, MAGIC_BE):
        return WalDamage(0, 0, 0, header_damaged=True) if any(data[:HEADER]) else None
    big = magic == MAGIC_BE
    salts = data[16:24]
    s0, s1 = _checksum(data[:24], big, 0, 0)
    if struct.pack(">II", s0, s1) != data[24:32]:
        return WalDamage(0, 0, 0, header_damaged=True)
    size = FRAME_HEADER + page_size
    frames = (len(data) - HEADER) // size
    for n in range(frames):
        at = HEADER + n * size
        head = data[at : at + FRAME_HEADER]
        if head[8:16] == salts:
            s0, s1 = _checksum(head[:8] + data[at + FRAME_HEADER : at + size], big, s0, s1)
            if struct.pack(">II", s0, s1) == head[16:24]:
                continue
        # SQLite's recovery stops here: the normal end of this generation (older frames
        # follow), a commit torn by a crash, or damage when later commits of it follow.
        return _after_bad_frame(data, n, frames, size, salts)
    return None


def _after_bad_frame(data: bytes, bad: int, frames: int, size: int, salts: bytes) -> WalDamage | None:
    """Damage when commit frames of this generation follow the frame where recovery stops."""
    dropped = commits = 0
    for n in range(bad + 1, frames):
        head = data[HEADER + n * size : HEADER + n * size + FRAME_HEADER]
        if head[8:16] != salts:
            continue
        dropped += 1
        commits += _is_commit(head)
    if not commits:
        return None
    own = data[HEADER + bad * size : HEADER + bad * size + FRAME_HEADER]
    commits += _is_commit(own) if own[8:16] == salts else 0  # the damaged frame may end a commit too
    return WalDamage(bad + 1, dropped + 1, commits)


def _is_commit(head: bytes) -> int:
    return 1 if struct.unpack(">I", head[4:8])[0] != 0 else 0
