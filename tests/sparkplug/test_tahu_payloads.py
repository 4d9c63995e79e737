"""Payloads written by Eclipse Tahu's JavaScript codec (npm `sparkplug-payload`, the test host's)
read by the agent now (protobuf runtime, agent/sparkplug/payload.py) exactly as the hand-written
decoder the agent had before issue 37 read them (bench/sparkplug_hand_codec.py): every datatype
Tahu writes, properties, nulls, a DataSet, and the commands a host sends."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sparkplug_parts import HOST_DIR, NODE

from agent.sparkplug.host import rebirth_requested
from agent.sparkplug.payload import decode, metrics_of

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench import sparkplug_hand_codec as hand  # noqa: E402

pytestmark = pytest.mark.skipif(
    NODE is None or not (HOST_DIR / "node_modules" / "sparkplug-payload").is_dir(),
    reason="Node.js and peers/node/node_modules are needed (npm ci --prefix peers/node --omit=optional)",
)

# Reads a JSON list of payloads on stdin, writes the hex of each as Tahu encodes it.
ENCODE = """
const sp = require("sparkplug-payload").get("spBv1.0");
const Long = require("long");
let text = "";
process.stdin.on("data", (d) => (text += d));
process.stdin.on("end", () => {
  const big = (v) => {
    if (typeof v === "string" && /^-?[0-9]+n$/.test(v)) return Long.fromString(v.slice(0, -1));
    if (v && v.type === "Buffer") return Buffer.from(v.data);
    return v;
  };
  const fix = (m) => {
    m.value = big(m.value);
    if (m.timestamp !== undefined) m.timestamp = big(m.timestamp);
    for (const p of Object.values(m.properties || {})) p.value = big(p.value);
    return m;
  };
  const out = JSON.parse(text).map((p) => {
    p.timestamp = big(p.timestamp);
    p.metrics = p.metrics.map(fix);
    return Buffer.from(sp.encodePayload(p)).toString("hex");
  });
  process.stdout.write(JSON.stringify(out));
});
"""

TS = "1776844800123n"
REBIRTH = "Node Control/Rebirth"
PAYLOADS: list[dict[str, Any]] = [
    {"timestamp": TS, "seq": 0, "metrics": [{"name": REBIRTH, "type": "Boolean", "value": True}]},
    {"timestamp": TS, "metrics": [{"name": REBIRTH, "type": "Boolean", "value": False, "timestamp": TS}]},
    {"timestamp": TS, "seq": 3, "metrics": [{"name": "Node Control/Reboot", "type": "Boolean", "value": True}]},
    {
        "timestamp": TS,
        "seq": 255,
        "metrics": [
            {"name": "i8", "type": "Int8", "value": -5},
            {"name": "i16", "type": "Int16", "value": -300},
            {"name": "i32", "type": "Int32", "value": -70000},
            {"name": "i64", "type": "Int64", "value": "-9007199254740993n"},
            {"name": "u8", "type": "UInt8", "value": 250},
            {"name": "u32", "type": "UInt32", "value": 4000000000},
            {"name": "u64", "type": "UInt64", "value": "18446744073709551615n"},
            {"name": "f", "type": "Float", "value": 1.5},
            {"name": "d", "type": "Double", "value": -2.25e-300},
            {"name": "b", "type": "Boolean", "value": False},
            {"name": "s", "type": "String", "value": "é/x \u2603"},
            {"name": "t", "type": "Text", "value": "long text"},
            {"name": "dt", "type": "DateTime", "value": TS},
            {"name": "raw", "type": "Bytes", "value": {"type": "Buffer", "data": [0, 1, 255]}},
            {"name": "n", "type": "String", "value": None, "isNull": True},
            {"name": "hist", "type": "Int32", "value": 1, "isHistorical": True, "isTransient": True},
        ],
    },
    {
        "timestamp": TS,
        "metrics": [
            {
                "name": "props",
                "type": "String",
                "value": "v",
                "properties": {
                    "k": {"type": "String", "value": "v"},
                    "z": {"type": "Int64", "value": None},
                    "w": {"type": "Boolean", "value": True},
                    "q": {"type": "Double", "value": 0.5},
                },
            },
            {
                "name": "table",
                "type": "DataSet",
                "value": {
                    "numOfColumns": 2,
                    "types": ["Int32", "String"],
                    "columns": ["a", "b"],
                    "rows": [[1, "x"], [2, "y"]],
                },
            },
            {"name": REBIRTH, "type": "Boolean", "value": True},
        ],
    },
]


def tahu_encoded(payloads: list[dict[str, Any]]) -> list[bytes]:
    proc = subprocess.run(
        [str(NODE), "-e", ENCODE],
        cwd=HOST_DIR,
        input=json.dumps(payloads),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return [bytes.fromhex(h) for h in json.loads(proc.stdout)]


def test_tahu_s_payloads_read_as_the_hand_written_decoder_read_them() -> None:
    encoded = tahu_encoded(PAYLOADS)
    assert len(encoded) == len(PAYLOADS)
    for data in encoded:
        new, old = decode(data), hand.decode(data)
        assert (new.timestamp, new.seq if new.HasField("seq") else None) == (old.timestamp, old.seq)
        assert metrics_of(new) == old.metrics
    assert [rebirth_requested(d) for d in encoded] == [True, False, False, False, True]
    # a few values read, so the comparison above is not of two empty lists
    got = {m.name: m for m in metrics_of(decode(encoded[3]))}
    assert got["i64"].value == -9007199254740993 and got["u64"].value == 2**64 - 1
    assert got["s"].value == "é/x \u2603" and got["raw"].value == b"\x00\x01\xff"
    assert got["n"].value is None and got["hist"].historical is True
    props = {p.key: p.value for p in metrics_of(decode(encoded[4]))[0].properties}
    assert props == {"k": "v", "z": None, "w": True, "q": 0.5}
