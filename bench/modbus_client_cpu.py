"""CPU per request: pymodbus' AsyncModbusTcpClient against our own client (issue 35); one JSON line.

One simulator process serves --n controllers; each client reads 17 holding registers from each
controller back to back (one request in flight per connection), the two clients in turn for
--rounds rounds of --seconds each. Figures: this process's CPU time per request (median).

    python bench/modbus_client_cpu.py --n 200 --seconds 5 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from pymodbus.client import AsyncModbusTcpClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.sources.modbus.tcp_client import ModbusTcpClient  # noqa: E402
from bench.poll import start_sim  # noqa: E402

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)


async def side(make: Any, ports: list[int], seconds: float) -> float:
    """Microseconds of CPU per request over `seconds` (after 1 s of warm-up)."""
    clients = [make(p) for p in ports]
    assert all(await asyncio.gather(*(c.connect() for c in clients)))
    count = [0]
    stop = [False]

    async def one(c: Any) -> None:
        while not stop[0]:
            rr = await c.read_holding_registers(0, count=17, device_id=1)
            assert not rr.isError() and len(rr.registers if hasattr(rr, "registers") else rr.values) == 17
            count[0] += 1

    tasks = [asyncio.create_task(one(c)) for c in clients]
    await asyncio.sleep(1.0)
    n0, cpu0 = count[0], time.process_time()
    await asyncio.sleep(seconds)
    cpu, n = time.process_time() - cpu0, count[0] - n0
    stop[0] = True
    await asyncio.gather(*tasks)
    for c in clients:
        c.close()
    return cpu / n * 1e6


async def run(a: argparse.Namespace) -> dict[str, Any]:
    names = [f"PLC-{i:03d}" for i in range(a.n)]
    proc, ready = start_sim(names, opcua=False, rate=0)
    try:
        ports = [ready["modbus"][name]["port"] for name in names]
        sides = {
            "pymodbus": lambda p: AsyncModbusTcpClient(
                "127.0.0.1", port=p, timeout=1, retries=0, reconnect_delay=0
            ),
            "own": lambda p: ModbusTcpClient("127.0.0.1", port=p, timeout=1),
        }
        got: dict[str, list[float]] = {k: [] for k in sides}
        for r in range(a.rounds):
            for k in sorted(sides, reverse=bool(r % 2)):
                got[k].append(await side(sides[k], ports, a.seconds))
    finally:
        proc.kill()
    med = {k: round(statistics.median(v), 1) for k, v in got.items()}
    return {
        "bench": "modbus_client_cpu",
        "n": a.n,
        "seconds": a.seconds,
        "rounds": a.rounds,
        "registers": 17,
        "pymodbus_cpu_us_per_request": med["pymodbus"],
        "own_cpu_us_per_request": med["own"],
        "own_over_pymodbus": round(med["own"] / med["pymodbus"], 3),
        "runs_us": {k: [round(x, 1) for x in v] for k, v in got.items()},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=3)
    print(json.dumps(asyncio.run(run(p.parse_args()))))


if __name__ == "__main__":
    main()
