"""A forwarding process for the crash tests: `python forwarder_process.py DB URL` (not a test module).

It opens the store, registers the HTTP upstream and forwards until SIGTERM;
the tests kill it with SIGKILL at chosen moments.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from agent.config.upstreams import Backoff, HttpUpstream
from agent.service.forwarder import Forwarder
from agent.service.upstream_sink import build_sink
from agent.store.store import Store


async def main(db: str, url: str) -> None:
    store = await Store.open(db)
    up = HttpUpstream(
        "hist", url, batch_size=50, read_size=100, backoff=Backoff(0.05, 0.2), request_timeout_s=60
    )
    await store.register_upstreams([(up.name, up.backfill)], "2026-04-22T08:00:00.000Z")
    sink = build_sink(up, site="plant-1", gateway="gw-test")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("READY", flush=True)
    try:
        await Forwarder(store, sink, up, site="plant-1", gateway="gw-test", idle_poll_s=0.05).run(stop)
    finally:
        await sink.close()
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
