"""Process-wide settings the service runs with (`edge-agent run`), in one place.

`tuned_process()` is entered by `Service.run` for the whole life of the service and restores
what it changed on the way out (the service's process exits then anyway; a test that runs the
service in-process gets its interpreter back as it was). The benches that run the service's
parts in-process (`bench/replay.py`, `bench/poll.py`) enter it too, so they measure the agent
as the service runs it.

The cyclic garbage collector: the service's data (deliveries, rows read from the outbox,
entries, transitions, encoded events) are tuples and small objects that live for one batch
and are freed by reference counting; none of them are in cycles. At Python's default
young-generation threshold (700 more allocations than deallocations) a drain of a 30,000-event
backlog to HTTP made about 75 young collections and a few of the older generations, each going
over the batches still in hand: 64-109 ms of CPU per drain, found nothing to free. At
`SERVICE_GC_THRESHOLD` the same drain made no collection. Garbage in cycles, if any (an
exception's traceback, a closed connection's objects), is still collected: at most
`SERVICE_GC_THRESHOLD` allocations later. The older generations keep their
thresholds (relative to the young one)."""

from __future__ import annotations

import gc
import logging
import resource
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

SERVICE_GC_THRESHOLD = 20_000
OPEN_FILES_WANTED = 65_536


@contextmanager
def tuned_process() -> Iterator[None]:
    """The service's process-wide settings while the block runs (see the module's text)."""
    thresholds = gc.get_threshold()
    gc.set_threshold(SERVICE_GC_THRESHOLD, *thresholds[1:])
    files = raise_open_files_limit()
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, files)


def raise_open_files_limit(wanted: int = OPEN_FILES_WANTED) -> tuple[int, int] | None:
    """Raise the soft limit of open files towards the hard one (at most `wanted`); returns the
    limits before, to restore, or None when nothing changed.

    Every PLC connection is a socket: systemd starts services with a soft limit of 1,024 open
    files (its hard limit is 524,288), and a gateway with a thousand PLCs would then fail its
    connections beyond about a thousand with "Too many open files". The soft limit is the
    process's own to raise up to the hard one, as systemd's documentation advises for programs
    that need many files (epoll has no FD_SETSIZE limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:  # not allowed here: say so, run with what there is
        log.warning("open files limit stays at %d (could not raise it to %d: %s)", soft, target, exc)
        return None
    log.debug("open files limit raised from %d to %d", soft, target)
    return soft, hard
