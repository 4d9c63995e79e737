"""A private Mosquitto for the ledger's MQTT tests: free port, persistence, and a queue per
session that holds a ledger outage (`max_queued_messages 0` = unlimited; the stock 1000 drops
acknowledged QoS 1 messages beyond it silently)."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from pathlib import Path

from pgcluster import free_port

MOSQUITTO = shutil.which("mosquitto") or (
    "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None
)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Broker:
    def __init__(self, work: Path) -> None:
        assert MOSQUITTO is not None
        self.port = free_port()
        self.work = work
        self.log = work / "mosquitto.log"
        conf = work / "mosquitto.conf"
        conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
            f"persistence_location {work}/\nlog_dest file {self.log}\n"
            # As root Mosquitto drops to `mosquitto`, which cannot write pytest's 0700 tmp_path.
            f"user {pwd.getpwuid(os.geteuid()).pw_name}\n"
            "max_queued_messages 0\nmax_inflight_messages 1000\nautosave_interval 1\n"
        )
        self.proc = subprocess.Popen(
            [MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while not _listening(self.port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"mosquitto did not start: {self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else "(no log)"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
