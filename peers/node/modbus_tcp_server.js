// A Modbus TCP server on npm modbus-serial's ServerTCP: the independent peer for exception
// answers as a Modbus TCP-to-RTU gateway gives them (0x0A gateway path unavailable, 0x0B gateway
// target device failed to respond) and as a PLC gives them (0x02 illegal data address).
//
//     npm ci --prefix peers/node --omit=optional
//     node peers/node/modbus_tcp_server.js PORT        (modbus-serial takes 0 for 502: give one)
//
// Prints `READY <port>`. Commands, one per stdin line, each answered `OK`:
//   regs START V1 V2 ...        set holding registers (input registers read the same memory)
//   exception START COUNT CODE  reads overlapping [START, START+COUNT) answer exception CODE
//   clear                       no exceptions
// and `count`, answered `COUNT ACCEPTED OPEN`: the TCP connections accepted since the start and
// those open now (a client that kept its connection is told from one that reconnected).
"use strict";
const readline = require("readline");
const ModbusRTU = require("modbus-serial");

const regs = new Uint16Array(65536);
let exc = null; // { start, count, code }

function read(addr, length, unitID, callback) {
  if (exc && addr < exc.start + exc.count && exc.start < addr + length) {
    return callback({ modbusErrorCode: exc.code, msg: `exception ${exc.code}` });
  }
  return callback(null, Array.from(regs.slice(addr, addr + length)));
}

const vector = {
  getMultipleHoldingRegisters: read,
  getMultipleInputRegisters: read,
  getHoldingRegister: (addr, unitID, callback) => read(addr, 1, unitID, (err, v) => callback(err, v && v[0])),
  getInputRegister: (addr, unitID, callback) => read(addr, 1, unitID, (err, v) => callback(err, v && v[0])),
};

const server = new ModbusRTU.ServerTCP(vector, { host: "127.0.0.1", port: Number(process.argv[2] || 0), unitID: 1 });
server.on("socketError", () => {});
let accepted = 0;
let open = 0;
server.on("initialized", () => {
  server._server.on("connection", (socket) => {
    accepted += 1;
    open += 1;
    socket.on("close", () => (open -= 1));
  });
  const address = server._server.address();
  process.stdout.write(`READY ${address.port}\n`);
});

const lines = readline.createInterface({ input: process.stdin });
lines.on("line", (line) => {
  const [cmd, ...args] = line.trim().split(/\s+/);
  if (cmd === "regs") {
    const start = Number(args[0]);
    args.slice(1).forEach((v, i) => {
      regs[start + i] = Number(v);
    });
  } else if (cmd === "exception") {
    exc = { start: Number(args[0]), count: Number(args[1]), code: Number(args[2]) };
  } else if (cmd === "clear") {
    exc = null;
  } else if (cmd === "count") {
    process.stdout.write(`COUNT ${accepted} ${open}\n`);
    return;
  } else {
    process.stdout.write(`ERROR unknown command ${cmd}\n`);
    return;
  }
  process.stdout.write("OK\n");
});
lines.on("close", () => process.exit(0));
