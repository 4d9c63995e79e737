"""Real parts for the Sparkplug tests (not a test module): a private Mosquitto the tests can
kill and start again on the same port (the tests' one Mosquitto starter, tests/ledger/mosquitto.py),
and the independent Node.js host (peers/node/sparkplug_host.js, Eclipse Tahu's JavaScript codec), whose
decoded messages come back as dicts."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_ledger = str(Path(__file__).resolve().parents[1] / "ledger")
if _ledger not in sys.path:  # mosquitto.py is a file of tests/ledger, not a package module
    sys.path.insert(0, _ledger)
import mosquitto  # noqa: E402
from mosquitto import MOSQUITTO  # noqa: E402

HOST_DIR = Path(__file__).resolve().parents[2] / "peers" / "node"  # the outside code, one lockfile
NODE = shutil.which("node")


def missing_parts() -> str | None:
    """Why the host scenarios cannot run here, or None."""
    if MOSQUITTO is None:
        return "mosquitto is not installed"
    if NODE is None:
        return "Node.js is not installed (the independent Sparkplug host needs it)"
    if not (HOST_DIR / "node_modules" / "sparkplug-payload").is_dir():
        return "peers/node has no sparkplug-payload: run `npm ci --prefix peers/node --omit=optional`"
    return None


class Broker(mosquitto.Broker):
    """The tests' Mosquitto with Nagle off (`set_tcp_nodelay`) in place of the ledger tests' in-flight limit."""

    def __init__(self, work: Path) -> None:
        super().__init__(work, settings="set_tcp_nodelay true\n")


class Host:
    """The Node.js Sparkplug host: its decoded events in `events`, commands by `send()`."""

    def __init__(self, url: str, group: str, host_id: str | None = None, *, v22: bool = False) -> None:
        cmd = [str(NODE), str(HOST_DIR / "sparkplug_host.js"), "--url", url, "--group", group]
        if host_id:
            cmd += ["--host-id", host_id]
        if v22:
            cmd += ["--state-version", "22"]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_for(lambda e: e["event"] == "ready", timeout=20)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def messages(self, verb: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["event"] == "message" and (verb is None or e["verb"] == verb)]

    def wait_for(
        self, pred: Callable[[dict[str, Any]], bool], timeout: float = 20.0, count: int = 1
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            got = [e for e in self.snapshot() if pred(e)]
            if len(got) >= count:
                return got
            if time.monotonic() > deadline or self.proc.poll() is not None:
                err = self.proc.stderr.read() if self.proc.poll() is not None and self.proc.stderr else ""
                raise AssertionError(
                    f"host saw {len(got)} of {count} expected events; last: {self.snapshot()[-3:]} {err}"
                )
            time.sleep(0.02)

    async def until(
        self, pred: Callable[[dict[str, Any]], bool], timeout: float = 20.0, count: int = 1
    ) -> list[dict[str, Any]]:
        """`wait_for` without blocking the event loop (the agent runs in it)."""
        deadline = time.monotonic() + timeout
        while True:
            got = [e for e in self.snapshot() if pred(e)]
            if len(got) >= count or time.monotonic() > deadline or self.proc.poll() is not None:
                return self.wait_for(pred, 0, count)
            await asyncio.sleep(0.02)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def event_metrics(msgs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Every metric `name` in `msgs` with its message's verb, device, seq (in order)."""
    return [
        {**m, "verb": msg["verb"], "device": msg["device"], "seq": msg["seq"]}
        for msg in msgs
        for m in msg["metrics"]
        if m["name"] == name
    ]
