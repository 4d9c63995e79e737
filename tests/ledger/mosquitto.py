"""A private Mosquitto for the tests and benches (the ledger's MQTT tests, the Sparkplug scenarios):
free port, persistence, and a queue per session that holds an outage (`max_queued_messages 0` =
unlimited; the stock 1000 drops acknowledged QoS 1 messages beyond it silently). `kill()` (SIGKILL)
and `start()` again on the same port; `settings` adds lines to the configuration.

The port and the binary are found as `edge-agent ledger demo` finds its own (agent/cli/ledger/throwaway.py).
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
from pathlib import Path

from agent.cli.ledger.throwaway import free_port, listening, mosquitto_binary

MOSQUITTO = mosquitto_binary()
LEDGER_SETTINGS = "max_inflight_messages 1000\n"


class Broker:
    def __init__(self, work: Path, settings: str = LEDGER_SETTINGS, *, persistence: bool = True) -> None:
        assert MOSQUITTO is not None
        self.port = free_port()
        self.work = work
        self.log = work / "mosquitto.log"
        self.conf = work / "mosquitto.conf"
        self.conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence {str(persistence).lower()}\n"
            f"persistence_location {work}/\nlog_dest file {self.log}\n"
            # As root Mosquitto drops to `mosquitto`, which cannot write pytest's 0700 tmp_path.
            f"user {pwd.getpwuid(os.geteuid()).pw_name}\n"
            f"max_queued_messages 0\n{settings}autosave_interval 1\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self) -> None:
        assert MOSQUITTO is not None
        self.proc = subprocess.Popen(
            [MOSQUITTO, "-c", str(self.conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while not listening(self.port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"mosquitto did not start: {self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else "(no log)"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
