"""The OPC UA node layout of a simulated controller (pure: names and types, no server).

All node ids are strings in the simulator's namespace (``urn:edge-agent:sim``, index 2 on
an asyncua server where it is the first registered namespace; clients should resolve the
index from the URI after every connect)::

    ns=2;s=PUMP-07                        object, emits TransitionEventType events
    ns=2;s=PUMP-07.BootId                 UInt32 (absent when the controller has no boot id)
    ns=2;s=PUMP-07.Trip                   object per channel
    ns=2;s=PUMP-07.Trip.TransitionId      UInt16 or UInt32, as the channel's counter
    ns=2;s=PUMP-07.Trip.State             UInt16
    ns=2;s=PUMP-07.Trip.SourceTime        UInt64, ms since the Unix epoch (UTC)
    ns=2;s=PUMP-07.Ring                   object
    ns=2;s=PUMP-07.Ring.Head              UInt32 entries ever written
    ns=2;s=PUMP-07.Ring.Capacity          UInt16
    ns=2;s=PUMP-07.Ring.<Field>           one array per slot field, index = slot:
                                          Seq UInt32, Channel UInt16, State UInt16,
                                          TransitionId UInt32, BootId UInt32, SourceTime UInt64

Every channel node's ``DataValue.SourceTimestamp`` is the channel's last transition time
(the boot time before the first transition), so ``source_timestamp: source`` works too.
"""

from __future__ import annotations

from dataclasses import dataclass

from devices.controller import Controller

NAMESPACE = "urn:edge-agent:sim"
RING_ARRAYS = ("Seq", "Channel", "State", "TransitionId", "BootId", "SourceTime")


@dataclass(frozen=True)
class NodeLayout:
    controller: Controller
    ns_index: int = 2

    def sid(self, *parts: str) -> str:
        """The string identifier, e.g. ``PUMP-07.Trip.State``."""
        return ".".join((self.controller.name, *parts))

    def node(self, *parts: str) -> str:
        """The full node id text, e.g. ``ns=2;s=PUMP-07.Trip.State``."""
        return f"ns={self.ns_index};s={self.sid(*parts)}"

    def field_specs(self) -> dict[str, object]:
        """The OPC UA half of the agent config for this device (merged with the Modbus half elsewhere)."""
        c = self.controller
        out: dict[str, object] = {}
        if c.has_boot_id:
            out["boot_id"] = {"node": self.node("BootId")}
        out["channels"] = {
            spec.name: {
                "transition_id": {"node": self.node(spec.name, "TransitionId")},
                "state": {"node": self.node(spec.name, "State")},
                "source_timestamp": {"node": self.node(spec.name, "SourceTime")},
            }
            for spec in c.channels
        }
        fields = {
            "seq": "Seq",
            "channel": "Channel",
            "state": "State",
            "transition_id": "TransitionId",
            "boot_id": "BootId",
            "source_timestamp": "SourceTime",
        }
        if not c.has_boot_id:
            del fields["boot_id"]
        out["ring"] = {
            "head": {"node": self.node("Ring", "Head")},
            "capacity": {"node": self.node("Ring", "Capacity")},
            "slots": {"fields": {key: {"node": self.node("Ring", name)} for key, name in fields.items()}},
        }
        out["events"] = {"node": self.node(), "type": f"ns={self.ns_index};s=TransitionEventType"}
        return out
