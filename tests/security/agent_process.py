"""The agent's pollers and recorder in a process of their own (not a test module).

`python agent_process.py CONFIG SECONDS` loads CONFIG with the real loader, runs every device's
pollers into the store it names for SECONDS, then prints one JSON line: the peak RSS of this
process (``ru_maxrss``), the log lines at WARNING and above, and the keys stored. The tests
run the agent in its own process so that its memory is measured without the test runner's or
the servers'.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import sys
from pathlib import Path

from agent.config import loader as config
from agent.service.recorder import Recorder
from agent.sources.pollers import run_pollers
from agent.store import report
from agent.store.store import Store


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def main(path: str, seconds: float) -> None:
    lines = Lines()
    logging.getLogger().addHandler(lines)
    logging.getLogger().setLevel(logging.INFO)
    cfg = config.load(path)
    store = await Store.open(cfg.store.path)
    try:
        recorder = Recorder(store)
        stop, stop_recorder = asyncio.Event(), asyncio.Event()
        rec = asyncio.create_task(recorder.run(stop_recorder), name="recorder")
        pollers = asyncio.create_task(run_pollers(cfg.devices, recorder, stop), name="pollers")
        await asyncio.sleep(seconds)
        alive = not pollers.done() and not rec.done()
        stop.set()
        await pollers
        stop_recorder.set()
        await rec
        events = [e async for e in report.events(store.db)]
    finally:
        await store.close()
    keys = sorted([e["source"], e["transitionId"], e["bootId"]] for e in events)
    out = {
        "maxrss_kb": peak_rss_kb(),
        "alive": alive,
        "log": lines.lines,
        "keys": keys,
    }
    print(json.dumps(out), flush=True)


def peak_rss_kb() -> int:
    """Peak RSS of this process image (VmHWM).

    Not getrusage(RUSAGE_SELF).ru_maxrss: Linux carries the parent's high-water mark across
    fork and exec, so a child of a big pytest process would report pytest's peak.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
