# TEMPORARY diagnostics - delete
from __future__ import annotations
import asyncio, json, sqlite3, subprocess, time, threading, os
from pathlib import Path
import paho.mqtt.client as mqtt
import pytest
import importlib.util, sys
sys.path.insert(0, str(Path(__file__).parent))
import test_upstream_outage as T

OUT = Path(os.environ.get("DIAG_OUT", "/tmp/diag/out"))

class PahoCollector:
    def __init__(self, port, site):
        self.got = []
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="paho-fixed", clean_session=False)
        self.site = site
        self.c.on_connect = lambda c, u, f, rc, p: (self.events.append((time.time(), "connect", f.session_present)), c.subscribe(f"{site}/#", qos=1))
        self.c.on_disconnect = lambda c, u, f, rc, p: self.events.append((time.time(), "disconnect", str(rc)))
        self.c.on_message = self.on_message
        self.c.reconnect_delay_set(0.05, 0.2)
        self.events = []
        self.c.connect("127.0.0.1", port)
        self.c.loop_start()
    def on_message(self, c, u, m):
        body = json.loads(m.payload)
        for e in (body if isinstance(body, list) else [body]):
            self.got.append((time.time(), e["source"], e["id"], m.dup, m.mid))
    def stop(self):
        self.c.loop_stop()

@pytest.mark.skipif(T.MOSQUITTO is None, reason="no mosquitto")
async def test_diag(harness, checker, tmp_path):
    OUT.mkdir(parents=True, exist_ok=True)
    db = tmp_path / "events.db"
    broker = T.Broker(tmp_path)
    broker.conf.write_text(broker.conf.read_text() + f"log_dest file {OUT}/mosq.log\nlog_type all\nlog_timestamp_format %H:%M:%S\n")
    (OUT / "mosq.log").unlink(missing_ok=True)
    await broker.start()
    marks = []
    subf = open(OUT / "mosquitto_sub.txt", "w")
    sub = subprocess.Popen(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(broker.port), "-c", "-q", "1", "-i", "mosqsub-fixed", "-t", f"{harness.SITE}/#"], stdout=subf, stderr=subprocess.STDOUT)
    pc = PahoCollector(broker.port, harness.SITE)
    await asyncio.sleep(0.5)
    try:
        async with (
            harness.Plant(harness.controllers(4), opcua_port=None) as plant,
            T.collector(broker.port, harness.SITE) as got,
        ):
            up = harness.mqtt_upstream(broker.port)
            cfg = harness.write_config(
                tmp_path / "config.yaml", store=db, devices=plant.device_configs(),
                upstreams=[{**up, "mqtt": {**up["mqtt"], "max_inflight": 1, "read_size": 10, "client_id": "agent-fixed"}}],
            )
            agent = harness.AgentProcess(cfg, tmp_path / "agent.log")
            load = harness.Load(plant)
            try:
                await agent.start()
                await agent.started()
                await broker.stop(); marks.append((time.time(), "stop0"))
                load.start(T.RATE, seed=4)
                await asyncio.sleep(3.0)
                await load.halt()
                await harness.eventually(lambda: load.made <= set(checker.committed_keys(db)), 20, "recorded")
                total = len(checker.committed_keys(db))
                for k in (1, 2, 3):
                    await broker.start(); marks.append((time.time(), f"start{k}"))
                    await harness.eventually(lambda k=k: T.delivered(db) >= k * total // 4, 20, "drain progress")
                    await broker.stop(); marks.append((time.time(), f"stop{k}"))
                    await asyncio.sleep(0.3)
                await broker.start(); marks.append((time.time(), "start4"))
                committed = set(checker.committed_keys(db))
                ids = {checker.cloud_id(harness.SITE, k) for k in committed}
                try:
                    await harness.eventually(lambda: ids <= {(e["source"], e["id"]) for e in got}, 20, "drained")
                except AssertionError:
                    pass
                await asyncio.sleep(2)
                rc, _ = await agent.stop()
            finally:
                await agent.close()
            aio = {(e["source"], e["id"]) for e in got}
    finally:
        await broker.stop()
        sub.terminate(); subf.close(); pc.stop()
    mos = set()
    for line in (OUT / "mosquitto_sub.txt").read_text().splitlines():
        try:
            b = json.loads(line)
        except Exception:
            continue
        for e in (b if isinstance(b, list) else [b]):
            mos.add((e["source"], e["id"]))
    pah = {(s, i) for _, s, i, _, _ in pc.got}
    con = sqlite3.connect(db)
    rows = con.execute("SELECT o.outbox_id, o.sent_at, o.attempts, e.source, e.transition_id, e.boot_id FROM outbox o JOIN events e ON e.canonical_id = o.ref_id WHERE o.kind='transition' ORDER BY o.outbox_id").fetchall()
    report = {"marks": marks, "total": len(ids), "aiomqtt_missing": [], "mosqsub_missing": [], "paho_missing": [], "rows": [], "paho_events": pc.events}
    for oid, sent, att, src, tid, boot in rows:
        cid = checker.cloud_id(harness.SITE, (src, str(tid), str(boot)))
        flags = (cid in aio, cid in mos, cid in pah)
        report["rows"].append((oid, sent, att, cid, flags))
        for name, f in zip(("aiomqtt_missing", "mosqsub_missing", "paho_missing"), flags):
            if not f:
                report[name].append(oid)
    (OUT / "report.json").write_text(json.dumps(report, indent=1, default=str))
    (OUT / "agent.log").write_text((tmp_path / "agent.log").read_text())
    print({k: (len(v) if isinstance(v, list) else v) for k, v in report.items()})
    print("aiomqtt missing", report["aiomqtt_missing"]); print("mosqsub missing", report["mosqsub_missing"]); print("paho missing", report["paho_missing"])
