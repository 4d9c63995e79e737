"""The least a ledger does for receipts, for the replay bench: read the events, answer receipts.

It subscribes to the events' topic at QoS 1, takes each message's `gateway` and `outboxid` (one
regular expression over the body, no JSON parse and no database), and every 50 ms (the ledger's
gathering time) publishes the receipts owed with the ledger's own code (`agent.core.receipts`).
So the bench measures what receipts cost the gateway (the `sent` state, the subscription, the
confirming transactions), not a ledger. A process of its own:

    python bench/receipt_ledger.py TOPIC [PORT]   # prints READY once subscribed, runs until killed
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiomqtt

from agent.core.receipts import receipts_for

GATHER_S = 0.05
_REF = re.compile(rb'"gateway":"([^"\\]*)","outboxid":"([^"\\]*)"')


async def main(topic: str, port: int) -> None:
    seen: list[tuple[str, str]] = []
    async with aiomqtt.Client("127.0.0.1", port, identifier=f"bench-receipts-{id(seen)}") as client:
        await client.subscribe(topic, qos=1)
        print("READY", flush=True)

        async def answer() -> None:
            while True:
                await asyncio.sleep(GATHER_S)
                if seen:
                    batch = seen[:]
                    del seen[:]
                    for t, body in receipts_for(batch, "bench-ledger"):
                        client._client.publish(t, body, 1)

        task = asyncio.create_task(answer())
        try:
            async for m in client.messages:
                seen.extend((g.decode(), o.decode()) for g, o in _REF.findall(bytes(m.payload)))
        finally:
            task.cancel()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1883))
