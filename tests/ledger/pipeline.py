"""Real processes for the end-to-end ledger tests: a simulator of busy PLCs, one gateway
(`edge-agent run`) whose MQTT upstream feeds `edge-agent ledger run`, one Mosquitto (`Broker`);
and the queries the tests check them with."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from mosquitto import Broker

AGENT = [sys.executable, "-m", "agent"]


def wait_for(pred: Any, timeout: float, what: str) -> None:
    """Until `pred()`; a store that exists before its tables do (the gateway migrating it) is "not yet"."""
    deadline = time.monotonic() + timeout
    while not _holds(pred):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _holds(pred: Any) -> bool:
    try:
        return bool(pred())
    except sqlite3.OperationalError:  # e.g. "no such table: events" while the store is being made
        return False


def store_rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def ledger_rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql).fetchall()  # type: ignore[arg-type]


def outbox_states(db: Path) -> dict[str, int]:
    return dict(store_rows(db, "SELECT state, count(*) FROM outbox GROUP BY state"))  # type: ignore[arg-type]


class Pipeline:
    """A simulator of busy PLCs, one gateway, one ledger, one broker: each its own process."""

    def __init__(
        self,
        tmp: Path,
        dsn: str,
        broker: Broker,
        receipts: bool = True,
        *,
        status_every: str = "60s",
        rate: int = 30,
    ) -> None:
        self.tmp, self.dsn, self.broker = tmp, dsn, broker
        self.sim = subprocess.Popen(
            [
                *AGENT,
                "simulate",
                "--modbus-port",
                "0",
                "--no-opcua",
                "--controllers",
                "PLC-1",
                "PLC-2",
                *(["--random", str(rate)] if rate else []),
                "--poll",
                "100ms",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.sim.stdout is not None
        lines: list[str] = []
        while "word_order" not in (lines[-1] if lines else ""):
            line = self.sim.stdout.readline()
            assert line, "the simulator ended:\n" + "\n".join(lines)
            lines.append(line.rstrip("\n"))
        devices = "\n".join(lines[next(i for i, x in enumerate(lines) if x.startswith("devices:")) :])
        self.db = tmp / "gw.db"
        self.gw_cfg = tmp / "gw.yaml"
        self.gw_cfg.write_text(
            f"site: plant\ngateway: gw-1\nstore: {{path: '{self.db}'}}\nstatus_every: {status_every}\n"
            f"upstreams:\n  - name: ledger\n    mqtt: {{url: '{broker.url}',"
            " topic: '{site}/events/{device}/{channel}', receipt_timeout: 3s,"
            f" receipts: {str(receipts).lower()},"
            " ack_timeout: 3s, backoff: {initial: 0.2s, max: 1s}}\n" + devices + "\n"
        )
        self.ledger_cfg = tmp / "ledger.yaml"
        self.ledger_cfg.write_text(
            f"dsn: '{dsn}'\nmqtt: {{host: 127.0.0.1, port: {broker.port}, topic: '+/events/#',"
            " client_id: ledger-1}\n"
        )
        self.ledger_log = tmp / "ledger.log"
        self.gw_log = tmp / "gw.log"
        self.ledger = self._start_ledger()
        wait_for(
            lambda: "mqtt intake subscribed" in self.ledger_log.read_text(), 60, "the ledger's subscription"
        )
        self.gateway = self._start_gateway()

    def _start_ledger(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*AGENT, "ledger", "run", "-c", str(self.ledger_cfg)], stderr=self.ledger_log.open("a")
        )

    def _start_gateway(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*AGENT, "run", "-c", str(self.gw_cfg)], stdout=subprocess.DEVNULL, stderr=self.gw_log.open("a")
        )

    def restart_broker(self) -> None:
        """SIGKILL the broker, start it again, and wait until the ledger has subscribed anew."""
        subscribed = self.ledger_log.read_text().count("subscribed")
        self.broker.kill()
        time.sleep(0.5)
        self.broker.start()
        wait_for(
            lambda: self.ledger_log.read_text().count("subscribed") > subscribed,
            60,
            "the ledger subscribed again",
        )

    def kill9_ledger(self) -> None:
        self.ledger.send_signal(signal.SIGKILL)
        self.ledger.wait()
        self.ledger = self._start_ledger()

    def kill9_gateway(self) -> None:
        self.gateway.send_signal(signal.SIGKILL)
        self.gateway.wait()
        self.gateway = self._start_gateway()

    def stop(self) -> None:
        for p in (self.sim, self.gateway, self.ledger):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (self.sim, self.gateway, self.ledger):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
