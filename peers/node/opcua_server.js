// A node-opcua server with the node layout of devices/opcua_nodes.py (one controller, one
// channel), for bench/opcua_subscribe.py only: the Python asyncua server cannot make 5,000
// transitions/s on a 2-core machine. Same stdin/stdout protocol as the bench's own server:
// a line `READY {"endpoint": ...}`, then per stdin line `burst N RATE CHUNK` the transitions
// (CHUNK at a time: the ring slots, the channel nodes and the ring head written once per
// chunk, one TransitionEventType event per transition) answered by `DONE {...}`; and per line
// `reset N` the channel's transition counter set to N (no ring entry, no event: a counter reset
// within the boot, as devices/controller.py's set_counter), answered by `DONE {...}` too.
// BOOT_ID (default 17) and PORT (default 0: a free one) let a test restart the server on the
// same endpoint as a new boot; counters start at 0. Per line `count` the clients it has seen,
// answered by `DONE {"sessions": N, "channels": N, "sessions_open": N, "channels_open": N}`
// (sessions created and secure channels opened since it started, and those open now), so a
// test can tell a client that kept its connection from one that reconnected. With CERT_PEM and KEY_PEM (the server's
// certificate, application URI urn:edge-agent:sim:server as devices/pki.py makes it) the only
// endpoint is Basic256Sha256 SignAndEncrypt; clients' certificates are accepted unseen.
//
//     npm install --prefix peers/node      (node-opcua-server, pinned in package.json)
//     node peers/node/opcua_server.js NAME RING PKI_DIR [BOOT_ID [PORT [CERT_PEM KEY_PEM]]]
"use strict";
const readline = require("readline");
const { OPCUAServer } = require("node-opcua-server");
const { SecurityPolicy, MessageSecurityMode } = require("node-opcua-secure-channel");
const { DataType, Variant, VariantArrayType } = require("node-opcua-variant");
const { StatusCodes } = require("node-opcua-status-code");
const { OPCUACertificateManager } = require("node-opcua-certificate-manager");

const NAMESPACE = "urn:edge-agent:sim";
const [name, ringText, pki, bootText, portText, certPem, keyPem] = process.argv.slice(2);
const RING = Number(ringText);
const BOOT_ID = bootText === undefined ? 17 : Number(bootText);
const PORT = portText === undefined ? 0 : Number(portText);
const STATES = { 0: "Normal", 1: "Trip" };
const u64 = (ms) => [Math.floor(ms / 2 ** 32), ms >>> 0]; // node-opcua's UInt64: [high, low]

async function main() {
  // REJECT_UNKNOWN_CLIENTS=1: a client certificate not in PKI_DIR/trusted is refused (and filed in rejected/).
  const acceptUnknown = process.env.REJECT_UNKNOWN_CLIENTS !== "1";
  const serverCertificateManager = new OPCUACertificateManager({ rootFolder: pki, automaticallyAcceptUnknownCertificate: acceptUnknown });
  const server = new OPCUAServer({
    port: PORT,
    resourcePath: "/sim/",
    ...(certPem
      ? {
          securityPolicies: [SecurityPolicy.Basic256Sha256],
          securityModes: [MessageSecurityMode.SignAndEncrypt],
          certificateFile: certPem,
          privateKeyFile: keyPem,
          serverInfo: { applicationUri: "urn:edge-agent:sim:server" },
        }
      : { securityPolicies: [SecurityPolicy.None], securityModes: [MessageSecurityMode.None] }),
    allowAnonymous: true,
    serverCertificateManager,
    maxConnectionsPerEndpoint: 10,
  });
  let sessions = 0;
  let channels = 0;
  server.on("create_session", () => (sessions += 1));
  server.on("newChannel", () => (channels += 1));
  await server.initialize();
  const addressSpace = server.engine.addressSpace;
  const ns = addressSpace.registerNamespace(NAMESPACE);
  const sid = (...parts) => `s=${[name, ...parts].join(".")}`;

  const etype = ns.addObjectType({
    browseName: "TransitionEventType",
    nodeId: "s=TransitionEventType",
    subtypeOf: "BaseEventType",
    isAbstract: false,
  });
  const fields = [
    ["Channel", DataType.String],
    ["TransitionId", DataType.UInt32],
    ["BootId", DataType.UInt32],
    ["State", DataType.UInt16],
    ["StateName", DataType.String],
    ["SourceTime", DataType.UInt64],
  ];
  for (const [field, dataType] of fields) {
    ns.addVariable({
      propertyOf: etype,
      browseName: field,
      nodeId: `s=TransitionEventType.${field}`,
      dataType,
      modellingRule: "Mandatory",
    });
  }

  const obj = ns.addObject({
    browseName: name,
    nodeId: sid(),
    organizedBy: addressSpace.rootFolder.objects,
    eventNotifier: 1,
  });
  const variable = (parent, parts, dataType, value, array = false) =>
    ns.addVariable({
      componentOf: parent,
      browseName: parts[parts.length - 1],
      nodeId: sid(...parts),
      dataType,
      value: !array ? { dataType, arrayType: VariantArrayType.Scalar, value } : { dataType, arrayType: VariantArrayType.Array, value },
    });
  variable(obj, ["BootId"], DataType.UInt32, BOOT_ID);
  const ch = ns.addObject({ browseName: "Trip", nodeId: sid("Trip"), componentOf: obj });
  const tidNode = variable(ch, ["Trip", "TransitionId"], DataType.UInt32, 0);
  const stateNode = variable(ch, ["Trip", "State"], DataType.UInt16, 0);
  const timeNode = variable(ch, ["Trip", "SourceTime"], DataType.UInt64, [0, 0]);
  const ring = ns.addObject({ browseName: "Ring", nodeId: sid("Ring"), componentOf: obj });
  const headNode = variable(ring, ["Ring", "Head"], DataType.UInt32, 0);
  variable(ring, ["Ring", "Capacity"], DataType.UInt16, RING);
  const columns = {
    Seq: DataType.UInt32,
    Channel: DataType.UInt16,
    State: DataType.UInt16,
    TransitionId: DataType.UInt32,
    BootId: DataType.UInt32,
    SourceTime: DataType.UInt64,
  };
  const slots = {};
  const slotNodes = {};
  for (const [col, dataType] of Object.entries(columns)) {
    slots[col] = dataType === DataType.UInt16 ? new Uint16Array(RING) : new Uint32Array(RING);
    if (dataType === DataType.UInt64) slots[col] = new Array(RING).fill(0).map(() => [0, 0]);
    slotNodes[col] = variable(ring, ["Ring", col], dataType, slots[col], true);
  }

  await server.start();
  const endpoint = `opc.tcp://127.0.0.1:${server.endpoints[0].port}/sim/`;
  process.stdout.write(`READY ${JSON.stringify({ endpoint })}\n`);

  let tid = 0;
  let state = 0;
  let head = 0;
  let at = Date.now();
  const write = (node, dataType, value, ms, array) =>
    node.setValueFromSource(
      array
        ? new Variant({ dataType, arrayType: VariantArrayType.Array, value: value.slice() })
        : new Variant({ dataType, arrayType: VariantArrayType.Scalar, value }),
      StatusCodes.Good,
      new Date(ms),
    );
  const yieldNow = () => new Promise((resolve) => setImmediate(resolve));
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  async function burst(n, rate, chunk) {
    const first = tid + 1;
    const t0 = process.hrtime.bigint();
    const seconds = () => Number(process.hrtime.bigint() - t0) / 1e9;
    let made = 0;
    while (made < n) {
      const k = Math.min(chunk, n - made);
      for (let i = 0; i < k; i++) {
        tid += 1;
        state = 1 - state;
        head += 1;
        at = Date.now();
        const slot = (head - 1) % RING;
        slots.Seq[slot] = head;
        slots.Channel[slot] = 0;
        slots.State[slot] = state;
        slots.TransitionId[slot] = tid;
        slots.BootId[slot] = BOOT_ID;
        slots.SourceTime[slot] = u64(at);
        obj.raiseEvent(etype, {
          channel: { dataType: DataType.String, value: "Trip" },
          transitionId: { dataType: DataType.UInt32, value: tid },
          bootId: { dataType: DataType.UInt32, value: BOOT_ID },
          state: { dataType: DataType.UInt16, value: state },
          stateName: { dataType: DataType.String, value: STATES[state] },
          sourceTime: { dataType: DataType.UInt64, arrayType: VariantArrayType.Scalar, value: u64(at) },
          severity: { dataType: DataType.UInt16, value: 500 },
          message: { dataType: DataType.LocalizedText, value: { text: `Trip -> ${STATES[state]}` } },
          time: { dataType: DataType.DateTime, value: new Date(at) },
        });
      }
      // Ring slots first, then the channel, the head last (as devices/opcua_server.py).
      for (const [col, dataType] of Object.entries(columns)) write(slotNodes[col], dataType, slots[col], at, true);
      write(tidNode, DataType.UInt32, tid, at);
      write(stateNode, DataType.UInt16, state, at);
      write(timeNode, DataType.UInt64, u64(at), at);
      write(headNode, DataType.UInt32, head, at);
      made += k;
      if (rate > 0) {
        await sleep(Math.max(0, (made / rate - seconds()) * 1000));
      } else {
        await yieldNow();
      }
    }
    return { first, last: tid, seconds: seconds() };
  }

  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    const [command, n, rate, chunk] = line.trim().split(/\s+/);
    if (command === "count") {
      const open = { sessions_open: server.currentSessionCount, channels_open: server.currentChannelCount };
      process.stdout.write(`DONE ${JSON.stringify({ sessions, channels, ...open })}\n`);
      continue;
    }
    if (command === "reset") {
      tid = Number(n);
      write(tidNode, DataType.UInt32, tid, at);
      process.stdout.write(`DONE ${JSON.stringify({ transitionId: tid })}\n`);
      continue;
    }
    const done = await burst(Number(n), Number(rate), Math.min(Number(chunk), RING));
    process.stdout.write(`DONE ${JSON.stringify(done)}\n`);
  }
  await server.shutdown(0);
  process.exit(0);
}

main().catch((err) => {
  process.stdout.write(`FAILED ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
