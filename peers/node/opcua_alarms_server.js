// A node-opcua server with OPC UA Alarms & Conditions, the independent peer of the alarm tests
// (tests/alarms/) and of anyone who wants to try the agent against a stack no one here wrote.
// The conditions, their events, EventIds and ConditionRefresh are node-opcua's own: this script
// only builds the address space and turns stdin lines into condition transitions.
//
//     npm ci --prefix peers/node
//     node peers/node/opcua_alarms_server.js PORT CONTROLLER CONDITION[,CONDITION...]
//
// PORT 0 takes a free port. It prints `READY {"endpoint": ..., "port": ...}` once it listens.
// Then one command per stdin line, each answered by one line:
//   alarm COND ACTION   activate | acknowledge | clear, one condition event -> EVENT {"event_id", "time_ms"}
//   lose COND ACTION    the same transition, but its event never leaves the server (a queue that
//                       lost it): only a ConditionRefresh shows it -> EVENT {...}
//   refresh_required    a RefreshRequiredEvent from the Server object -> OK
//   refuse CODE         ConditionRefresh answers CODE (e.g. BadNotImplemented, BadMethodInvalid)
//                       instead of refreshing; `refuse Good` lets node-opcua answer again -> OK
//   reset               every condition inactive, acknowledged, not retained, no event -> OK
// and, unasked, `REFRESH {"subscription": id, "status": name}` whenever a client calls
// ConditionRefresh (answered by node-opcua, or refused).
//
// One condition follows devices/alarm_model.py: activate = Active, not Acked; acknowledge = Acked;
// clear = not Active; Retain while Active or not Acked. Events are raised by the condition and
// bubble up to the Server object (the controller object is a notifier of the Server).
"use strict";
const readline = require("readline");
const { OPCUAServer } = require("node-opcua-server");
const { SecurityPolicy, MessageSecurityMode } = require("node-opcua-secure-channel");
const { DataType } = require("node-opcua-variant");
const { StatusCodes } = require("node-opcua-status-code");

const NAMESPACE = "urn:edge-agent:sim";
const [portText, controller, conditionList] = process.argv.slice(2);
const say = (line) => process.stdout.write(`${line}\n`);

async function main() {
  const server = new OPCUAServer({
    port: Number(portText),
    resourcePath: "/sim/",
    securityPolicies: [SecurityPolicy.None],
    securityModes: [MessageSecurityMode.None],
    allowAnonymous: true,
    maxConnectionsPerEndpoint: 20,
  });
  await server.initialize();
  const addressSpace = server.engine.addressSpace;
  addressSpace.installAlarmsAndConditionsService();
  const ns = addressSpace.registerNamespace(NAMESPACE);
  const serverObject = addressSpace.rootFolder.objects.server;

  const plc = ns.addObject({
    browseName: controller,
    nodeId: `s=${controller}`,
    organizedBy: addressSpace.rootFolder.objects,
    eventNotifier: 1,
    eventSourceOf: serverObject,
  });
  const alarmType = addressSpace.findEventType("AlarmConditionType");
  const conditions = {};
  for (const name of conditionList.split(",")) {
    const input = ns.addVariable({
      componentOf: plc,
      browseName: `${name}Input`,
      nodeId: `s=${controller}.${name}.Input`,
      dataType: "Boolean",
      value: { dataType: DataType.Boolean, value: false },
    });
    const alarm = ns.instantiateAlarmCondition(alarmType, {
      browseName: name,
      nodeId: `s=${controller}.Alarms.${name}`,
      componentOf: plc,
      conditionName: name,
      conditionSource: plc,
      inputNode: input,
      optionals: ["ConfirmedState", "Confirm"],
    });
    conditions[name] = alarm;
    quiet(alarm);
  }

  // ConditionRefresh stays node-opcua's own method; the wrapper only reports the call, or
  // refuses it with the status a server without refresh answers.
  const conditionType = addressSpace.findEventType("ConditionType");
  const refreshMethod = conditionType.conditionRefresh;
  const ownRefresh = refreshMethod._asyncExecutionFunction;
  let refusal = null;
  refreshMethod.bindMethod((inputArguments, context, callback) => {
    const subscription = inputArguments[0] ? inputArguments[0].value : null;
    if (refusal !== null) {
      say(`REFRESH ${JSON.stringify({ subscription, status: refusal.name })}`);
      return callback(null, { statusCode: refusal });
    }
    return ownRefresh(inputArguments, context, (err, result) => {
      const status = result && result.statusCode ? result.statusCode.name : "Good";
      say(`REFRESH ${JSON.stringify({ subscription, status })}`);
      callback(err, result);
    });
  });

  await server.start();
  const port = server.endpoints[0].port;
  say(`READY ${JSON.stringify({ endpoint: `opc.tcp://127.0.0.1:${port}/sim/`, port })}`);

  function transition(name, action, emit) {
    const alarm = conditions[name];
    if (!alarm) throw new Error(`no condition ${name}`);
    const branch = alarm.currentBranch();
    if (action === "activate") {
      branch.setActiveState(true);
      branch.setAckedState(false);
    } else if (action === "acknowledge") {
      branch.setAckedState(true);
    } else if (action === "clear") {
      branch.setActiveState(false);
    } else {
      throw new Error(`unknown action ${action}`);
    }
    branch.setRetain(branch.getActiveState() || !branch.getAckedState());
    const time = new Date();
    const text = { activate: "active", acknowledge: "acknowledged", clear: "cleared" }[action];
    if (emit) {
      alarm.raiseNewCondition({ message: `${name} ${text}`, severity: 700, time, receiveTime: time });
    } else {
      // What raiseNewCondition does, but the event is not raised: the server "lost" it.
      branch.setTime(time);
      branch.setReceiveTime(time);
      branch.setMessage(`${name} ${text}`);
      branch.setSeverity(700);
      branch.renewEventId();
    }
    return { event_id: Buffer.from(branch.getEventId()).toString("hex"), time_ms: time.getTime() };
  }

  function quiet(alarm) {
    const branch = alarm.currentBranch();
    branch.setActiveState(false);
    branch.setAckedState(true);
    branch.setConfirmedState(true);
    branch.setRetain(false);
  }

  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    const [cmd, a, b] = line.trim().split(/\s+/);
    try {
      if (cmd === "alarm" || cmd === "lose") {
        say(`EVENT ${JSON.stringify(transition(a, b, cmd === "alarm"))}`);
      } else if (cmd === "refresh_required") {
        serverObject.raiseEvent("RefreshRequiredEventType", {});
        say("OK");
      } else if (cmd === "refuse") {
        refusal = a === "Good" ? null : StatusCodes[a];
        if (refusal === undefined) throw new Error(`unknown status ${a}`);
        say("OK");
      } else if (cmd === "reset") {
        Object.values(conditions).forEach(quiet);
        refusal = null;
        say("OK");
      } else {
        throw new Error(`unknown command ${cmd}`);
      }
    } catch (err) {
      say(`ERROR ${JSON.stringify(String(err && err.message ? err.message : err))}`);
    }
  }
  await server.shutdown(0);
  process.exit(0);
}

main().catch((err) => {
  say(`FAILED ${err && err.stack ? err.stack : err}`);
  process.exit(1);
});
