"""The service's side of a full store: when to give back the reserve, and to whom.

`StoreRoom` implements the recorder's `WhenFull`. The first full write releases the reserve
file (a full disk) so the writes that must commit still can: live state for `status`,
forwarders' attempt counts and delivered-marks (forwarding goes on while the disk is full),
and at SIGTERM the observations still held. New observations wait until the disk has more
room than the reserve (`Reserve.disk_room`). At SIGTERM the quota is also opened to the
whole `store.max_size` (a reached quota). Once writes succeed again and there is room, the
reserve file is made again.
"""

from __future__ import annotations

import asyncio
import logging

from agent.store.reserve import Reserve, fs_free_bytes
from agent.store.store import Store

log = logging.getLogger(__name__)


class StoreRoom:
    """The reserve of one running store (see module docstring)."""

    def __init__(self, store: Store, reserve: Reserve) -> None:
        self.store = store
        self.reserve = reserve

    async def full(self) -> None:
        if self.reserve.released or self.reserve.size <= 0:
            return
        free = await asyncio.to_thread(fs_free_bytes, self.store.path)
        if free > 2 * self.reserve.size:
            return  # the quota, not the disk: its reserve is opened at shutdown only
        freed = await asyncio.to_thread(self.reserve.release)
        log.error(
            "ALARM store disk full: released the store reserve (%d bytes at %s) so that status, "
            "delivered-marks and the shutdown can still commit; new observations wait for room",
            freed,
            self.reserve.file,
        )

    def may_write(self) -> bool:
        return self.reserve.disk_room()

    async def last_chance(self) -> None:
        if not self.reserve.released:
            freed = await asyncio.to_thread(self.reserve.release)
            log.warning("released the store reserve (%d bytes) for the last commit", freed)
        if self.reserve.max_size is not None:
            await self.store.set_quota(self.reserve.max_size)
            log.warning(
                "opened the store quota to store.max_size (%d bytes) for the last commit",
                self.reserve.max_size,
            )

    async def recovered(self) -> None:
        if not (self.reserve.released and self.reserve.disk_room()):
            return
        if await asyncio.to_thread(self.reserve.ensure):
            log.info("store reserve kept again (%d bytes at %s)", self.reserve.size, self.reserve.file)
