// An independent Sparkplug B host for the tests: Eclipse Tahu's JavaScript codec
// (npm sparkplug-payload) and mqtt.js. Not edge-agent's code: it judges our encoder.
//
//   node sparkplug_host.js --url mqtt://127.0.0.1:PORT --group G [--host-id H [--state-version 22]]
//   (with --host-id it publishes its STATE online when connected, and its Will says offline;
//   --state-version 22: as a Sparkplug 2.2 host, `STATE/<H>` ONLINE/OFFLINE)
//
// Prints one JSON line per event on stdout: {"event":"ready"}, {"event":"connect"},
// {"event":"message", topic, verb, node, device, seq, timestamp, metrics:[...]} (every
// message under spBv1.0/<group>/, decoded), {"event":"undecodable", topic, error}.
// Reads JSON commands on stdin, one per line:
//   {"cmd":"state","online":true|false}                   STATE (3.0 JSON, retained, QoS 1)
//   {"cmd":"state22","online":true|false}                 STATE/<host-id> ONLINE|OFFLINE (2.2)
//   {"cmd":"rebirth","node":"N"}                          NCMD Node Control/Rebirth = true
//   {"cmd":"ncmd","node":"N","metrics":[{name,type,value}]}  an NCMD with other metrics
//   {"cmd":"raw","topic":"T","hex":"..."}                 bytes as they are (bad input)
//   {"cmd":"quit"}
"use strict";
const mqtt = require("mqtt");
const sparkplug = require("sparkplug-payload").get("spBv1.0");
const proto = require("sparkplug-payload/lib/sparkplugPayloadProto");
const Long = require("long");
const readline = require("readline");

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const group = args.group;
const hostId = args["host-id"];
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const num = (v) => (Long.isLong(v) ? Number(v.toString()) : v);
const births = new Map(); // "node/device/metric" -> datatype number, from NBIRTH/DBIRTH
const TYPES = { Int64: 4, Boolean: 11, String: 12, Int32: 3, UInt64: 8, Double: 10, Float: 9 };

const v22 = args["state-version"] === "22";
const stateTopic = hostId ? (v22 ? `STATE/${hostId}` : `spBv1.0/STATE/${hostId}`) : null;
const stateBody = (online) => (v22 ? (online ? "ONLINE" : "OFFLINE") : JSON.stringify({ online, timestamp: Date.now() }));
const will = stateTopic ? { topic: stateTopic, payload: stateBody(false), qos: 1, retain: true } : undefined;
const client = mqtt.connect(args.url, { clientId: `test-host-${process.pid}`, clean: true, reconnectPeriod: 200, will });

function publishState(online) {
  client.publish(stateTopic, stateBody(online), { qos: 1, retain: true });
}

client.on("connect", () => {
  out({ event: "connect" });
  client.subscribe(`spBv1.0/${group}/#`, { qos: 1 }, () => {
    if (stateTopic && !client._sentOnline) { client._sentOnline = true; publishState(true); }
    out({ event: "ready" });
  });
});
client.on("error", (e) => out({ event: "error", error: String(e) }));

function valueOf(rawMetric, type) {
  switch (type) {
    case 4: return rawMetric.longValue == null ? null : num(Long.fromValue(rawMetric.longValue).toSigned());
    case 8: return num(rawMetric.longValue);
    case 11: return rawMetric.booleanValue;
    case 12: return rawMetric.stringValue;
    default: return null;
  }
}

client.on("message", (topic, payload) => {
  const parts = topic.split("/");
  const [ns, , verb, node, device] = parts;
  if (ns !== "spBv1.0" || verb === "STATE" || verb === "NCMD" || verb === "DCMD") return;
  let decoded, raw;
  try {
    decoded = sparkplug.decodePayload(payload);
    raw = proto.org.eclipse.tahu.protobuf.Payload.decode(payload);
  } catch (e) {
    out({ event: "undecodable", topic, error: String(e) });
    return;
  }
  const metrics = (decoded.metrics || []).map((m, i) => {
    const key = `${node}/${device || ""}/${m.name}`;
    const rawM = raw.metrics[i];
    let type = m.type, value = m.value;
    if (verb.endsWith("BIRTH") && rawM.datatype != null) births.set(key, rawM.datatype);
    if (type === undefined) { // data messages leave the datatype out: the birth declared it
      const t = births.get(key);
      type = t === undefined ? undefined : Object.keys(TYPES).find((k) => TYPES[k] === t);
      value = rawM.isNull ? null : valueOf(rawM, t);
    } else {
      value = num(value);
    }
    const props = {};
    if (m.properties) for (const [k, v] of Object.entries(m.properties)) props[k] = { type: v.type, value: num(v.value) };
    return {
      name: m.name, type, value, timestamp: num(m.timestamp),
      isHistorical: m.isHistorical === true, isNull: rawM.isNull === true,
      declared: births.has(key), properties: props,
    };
  });
  out({ event: "message", topic, verb, node, device: device || null,
        seq: decoded.seq === undefined ? null : num(decoded.seq), timestamp: num(decoded.timestamp), metrics });
});

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  if (!line.trim()) return;
  const c = JSON.parse(line);
  if (c.cmd === "state") publishState(c.online);
  else if (c.cmd === "state22") client.publish(`STATE/${hostId}`, c.online ? "ONLINE" : "OFFLINE", { qos: 1, retain: true });
  else if (c.cmd === "rebirth" || c.cmd === "ncmd") {
    const metrics = c.cmd === "rebirth" ? [{ name: "Node Control/Rebirth", type: "Boolean", value: true }] : c.metrics;
    const body = sparkplug.encodePayload({ timestamp: Date.now(), metrics });
    client.publish(`spBv1.0/${group}/NCMD/${c.node}`, body, { qos: 1 }, () => out({ event: "sent", cmd: c.cmd }));
  } else if (c.cmd === "raw") client.publish(c.topic, Buffer.from(c.hex, "hex"), { qos: 1 }, () => out({ event: "sent", cmd: "raw" }));
  else if (c.cmd === "quit") client.end(false, () => process.exit(0));
});
