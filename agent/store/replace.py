"""Replacing a damaged store file with a new one that holds what could be salvaged, such that a
crash at any moment neither loses the salvage nor leaves an empty store in the damaged one's
place.

Steps (`replace_damaged`):
1. write `<store>.salvaging` naming the file the damaged store will be moved to (synced);
2. move the database and its `-wal`/`-shm` aside together (`<store>.corrupt-<time>`);
3. make a new store at `<store>.salvage-new` and salvage the damaged file into it
   (`agent.store.salvage`), close it;
4. rename it to `<store>` (atomic), sync the directory, remove the marker.

A full disk during step 3 stops the start (StoreFull) with the marker in place, so the next
start does the salvage again; nothing of the damaged file is given up for want of room.

At every start `finish_interrupted` looks for the marker first: with no store file in place
(a crash during 2-4), the salvage is done again from the start into a fresh
`<store>.salvage-new`; with a store file in place (a crash before 2, or after 4), the marker
only goes (the normal open then finds the file damaged again, or fine).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from agent.core.errors import StoreFull
from agent.store.salvage import Progress, SalvageReport, salvage_into
from agent.store.store import Store

log = logging.getLogger(__name__)

MARKER = ".salvaging"
NEW = ".salvage-new"
SUFFIXES = ("", "-wal", "-shm")

OpenNew = Callable[[str], Awaitable[Store]]


async def replace_damaged(
    path: str, stamp: str, open_new: OpenNew, now: str, progress: Progress | None = None
) -> tuple[list[str], SalvageReport | None]:
    """Move the damaged store at `path` aside and put a salvaged new one in its place.

    Returns the moved files and what the salvage took (None when it failed; logged)."""
    damaged = f"{path}.corrupt-{stamp}"
    _write_synced(Path(path + MARKER), damaged)
    moved = []
    for suffix in SUFFIXES:
        src = Path(path + suffix)
        if src.exists():
            dst = Path(damaged + suffix)
            src.rename(dst)
            moved.append(str(dst))
    _sync_dir(path)
    return moved, await _salvage_to_new(path, damaged, open_new, now, progress)


async def finish_interrupted(
    path: str, open_new: OpenNew, now: str, progress: Progress | None = None
) -> SalvageReport | None:
    """Finish a replacement that a crash interrupted (see module docstring); None when none was."""
    marker = Path(path + MARKER)
    if not marker.exists():
        return None
    if Path(path).exists():
        _remove_new(path)
        marker.unlink()
        return None
    damaged = marker.read_text(encoding="utf-8").strip()
    log.warning("a salvage of %s was interrupted; doing it again", damaged)
    return await _salvage_to_new(path, damaged, open_new, now, progress)


async def _salvage_to_new(
    path: str, damaged: str, open_new: OpenNew, now: str, progress: Progress | None
) -> SalvageReport | None:
    _remove_new(path)
    new = path + NEW
    store = await open_new(new)
    report: SalvageReport | None = None
    try:
        if Path(damaged).exists():
            report = await salvage_into(store, damaged, now, progress)
    except StoreFull:
        # No room for the new store: leave the marker, so the next start does it all again.
        await store.close()
        raise
    except Exception:  # best effort by design: the new store must start even if salvage breaks
        log.exception("ALARM salvage of %s failed; nothing was taken from it", damaged)
        await store.close()
    else:
        await store.close()
    for suffix in SUFFIXES:  # closing removes the WAL; a reader may have kept it
        if Path(new + suffix).exists():
            os.replace(new + suffix, path + suffix)
    _sync_dir(path)
    Path(path + MARKER).unlink(missing_ok=True)
    return report


def _remove_new(path: str) -> None:
    for suffix in SUFFIXES:
        Path(path + NEW + suffix).unlink(missing_ok=True)


def _write_synced(file: Path, text: str) -> None:
    with open(file, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    _sync_dir(str(file))


def _sync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
