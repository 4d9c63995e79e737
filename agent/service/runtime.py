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
`SERVICE_GC_THRESHOLD` the same drain made no collection at all. Garbage in cycles, if any (an
exception's traceback, a closed connection's objects), is still collected: at most
`SERVICE_GC_THRESHOLD` allocations later. The older generations keep their thresholds
(relative to the young one).

The switch interval: the store's SQLite thread lets go of the interpreter lock while SQLite
steps through a statement and must take it back from the event loop to go on (each row it
reads becomes Python values under the lock). At Python's default 5 ms, while the loop is busy
(encoding a batch, the POSTs), the store's thread can wait up to that long for each hand-over.
At `SERVICE_SWITCH_INTERVAL_S` (what `edge-agent import` uses while it imports, for the same
reason) a 30,000-event HTTP drain went from a median of 35.3k to 39.3k events/s (16 drains in
one process, the two settings alternated, load average 3.4-4.0); the CPU of each thread per
drain did not change beyond the 10 ms ticks it is counted in."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

SERVICE_GC_THRESHOLD = 20_000
SERVICE_SWITCH_INTERVAL_S = 0.001


@contextmanager
def tuned_process() -> Iterator[None]:
    """The service's process-wide settings while the block runs (see the module's text)."""
    thresholds = gc.get_threshold()
    interval = sys.getswitchinterval()
    gc.set_threshold(SERVICE_GC_THRESHOLD, *thresholds[1:])
    sys.setswitchinterval(SERVICE_SWITCH_INTERVAL_S)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)
