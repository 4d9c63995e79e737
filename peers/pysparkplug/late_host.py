"""A Sparkplug host that joins late, on pysparkplug 0.6.1 (a stack no one here wrote).

Runs in a virtual environment of its own (`peers/pysparkplug/requirements.txt`: pysparkplug pins
paho-mqtt < 2, the agent uses 2.x). Subscribes to `spBv1.0/<group>/#` after the edge node's births
went out, decodes every message with pysparkplug's own decoder (births kept as pysparkplug's Client
keeps them), and prints one JSON line per message: its topic, whether it could be decoded, and the
metrics (name, datatype, value, properties) when it could. On the first data message it cannot
decode without a birth it publishes an NCMD `Node Control/Rebirth` = true to that edge node, as a
late host should (Sparkplug 3.0, 6.4.x), once.

    python late_host.py --port 1883 --group plant-1
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import paho.mqtt.client as paho_mqtt
from pysparkplug import DataType, Message, Metric, NCmd, Topic, get_current_timestamp
from pysparkplug._payload import Birth


def metric_json(m: Metric) -> dict[str, Any]:
    value: Any = m.value
    if isinstance(value, bytes):
        value = value.hex()
    props = None
    if getattr(m, "properties", None) is not None:
        props = str(m.properties)
    return {"name": m.name, "datatype": m.datatype.name, "value": value, "properties": props}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--group", required=True)
    a = p.parse_args()
    births: dict[tuple[str | None, str | None, str | None], Birth] = {}
    asked: set[str] = set()
    client = paho_mqtt.Client(client_id="pysparkplug-late-host", clean_session=True)

    def say(doc: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(doc) + "\n")
        sys.stdout.flush()

    def on_message(_c: Any, _u: Any, msg: paho_mqtt.MQTTMessage) -> None:
        topic = Topic.from_str(msg.topic)
        if topic.message_type is None or topic.message_type.name == "STATE":
            return
        key = (topic.group_id, topic.edge_node_id, topic.device_id)
        kind = topic.message_type.name
        try:
            message = Message.from_mqtt_message(msg, birth=births.get(key))
        except Exception as exc:  # what pysparkplug says about a message it cannot read
            say({"topic": msg.topic, "kind": kind, "decoded": False, "error": f"{type(exc).__name__}: {exc}"})
            node = topic.edge_node_id or ""
            if kind in ("DDATA", "NDATA") and node not in asked:
                asked.add(node)
                rebirth = NCmd(
                    timestamp=get_current_timestamp(),
                    metrics=(
                        Metric(
                            timestamp=get_current_timestamp(),
                            name="Node Control/Rebirth",
                            datatype=DataType.BOOLEAN,
                            value=True,
                        ),
                    ),
                )
                client.publish(
                    f"spBv1.0/{topic.group_id}/NCMD/{node}", rebirth.encode(include_dtypes=True), qos=0
                )
                say({"asked_rebirth": node})
            return
        if isinstance(message.payload, Birth):
            births[key] = message.payload
        metrics = [metric_json(m) for m in getattr(message.payload, "metrics", ())]
        say({"topic": msg.topic, "kind": kind, "decoded": True, "metrics": metrics})

    client.on_message = on_message
    client.on_connect = lambda c, *_: c.subscribe(f"spBv1.0/{a.group}/#", qos=1)
    client.connect(a.host, a.port, keepalive=10)
    say({"ready": True})
    client.loop_forever()


if __name__ == "__main__":
    main()
