"""A hostile OPC UA server: the nodes an agent reads serve values no PLC should (tests only).

One plain asyncua server (no security, so that the hostility is in the values, not in the
handshake) with one object per attack, each laid out like a simulated controller
(``<NAME>.BootId``, ``<NAME>.Trip.TransitionId``, ``<NAME>.Trip.State``):

========== =====================================================================================
GOOD       ordinary values (boot id 7, transition 1, state 0): the control
BIG-STRING the state is a 10 MiB string (larger than a sane client's message limit)
BIG-ARRAY  the transition id is a 1,000,000-element UInt32 array (4 MB: fits a 4 MiB limit)
NESTED     the state is a Variant array nested ``depth`` levels deep
WRONG-TYPE the transition id is a ByteString, the boot id a LocalizedText
========== =====================================================================================

Run it as ``python -m devices.hostile_opcua [--port N]``: it prints ``READY <port>`` once it
listens and serves until killed; :func:`agent_config` gives the agent's ``devices:`` entries.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

import asyncua

logging.getLogger("asyncua").setLevel(logging.CRITICAL)

ua: Any = asyncua.ua
Server: Any = asyncua.Server  # type: ignore[attr-defined]

NAMESPACE = "urn:edge-agent:hostile"
ATTACKS = ("GOOD", "BIG-STRING", "BIG-ARRAY", "NESTED", "WRONG-TYPE")
BIG_STRING = 10 * 1024 * 1024
BIG_ARRAY = 1_000_000
BASE_DATA_TYPE = ua.NodeId(ua.ObjectIds.BaseDataType)


def nested(depth: int) -> Any:
    """A Variant array holding a Variant array ... ``depth`` levels deep, 1 at the bottom."""
    value = ua.Variant([ua.Variant(1, ua.VariantType.UInt32)], ua.VariantType.Variant)
    for _ in range(depth - 1):
        value = ua.Variant([value], ua.VariantType.Variant)
    return value


def _values(attack: str, depth: int) -> dict[str, Any]:
    """BootId, TransitionId and State Variants of one attack."""
    good = {
        "BootId": ua.Variant(7, ua.VariantType.UInt32),
        "TransitionId": ua.Variant(1, ua.VariantType.UInt32),
        "State": ua.Variant(0, ua.VariantType.UInt16),
    }
    if attack == "BIG-STRING":
        good["State"] = ua.Variant("x" * BIG_STRING, ua.VariantType.String)
    elif attack == "BIG-ARRAY":
        good["TransitionId"] = ua.Variant([1] * BIG_ARRAY, ua.VariantType.UInt32)
    elif attack == "NESTED":
        good["State"] = nested(depth)
    elif attack == "WRONG-TYPE":
        good["TransitionId"] = ua.Variant(b"\x00" * 64, ua.VariantType.ByteString)
        good["BootId"] = ua.Variant(ua.LocalizedText("seven"), ua.VariantType.LocalizedText)
    return good


class HostileOpcUaServer:
    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, depth: int = 100) -> None:
        self.host, self.port, self.depth = host, port, depth
        self._server: Any = None

    @property
    def endpoint(self) -> str:
        return f"opc.tcp://{self.host}:{self.port}/hostile/"

    async def start(self) -> None:
        server = Server()
        await server.init()
        server.disable_clock(True)
        server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
        idx = await server.register_namespace(NAMESPACE)
        for attack in ATTACKS:
            obj = await server.nodes.objects.add_object(ua.NodeId(attack, idx), attack)
            trip = await obj.add_object(ua.NodeId(f"{attack}.Trip", idx), "Trip")
            for name, variant in _values(attack, self.depth).items():
                parent = obj if name == "BootId" else trip
                sid = f"{attack}.BootId" if name == "BootId" else f"{attack}.Trip.{name}"
                # BaseDataType: any value goes (asyncua cannot guess a data type for a Variant array).
                await parent.add_variable(ua.NodeId(sid, idx), name, variant, datatype=BASE_DATA_TYPE)
        server.set_endpoint(self.endpoint)
        await server.start()
        self.port = int(server.bserver.port)
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()
            self._server = None


def agent_config(endpoint: str, attacks: tuple[str, ...] = ATTACKS) -> list[dict[str, Any]]:
    """The agent's ``devices:`` entries for the attacks (explicitly insecure, fast backoff)."""
    return [
        {
            "name": attack,
            "connections": [
                {"opcua": {"endpoint": endpoint, "security": {"policy": "None"}, "timeout": "2s"}}
            ],
            "poll": "100ms",
            "backoff": {"initial": "100ms", "max": "500ms"},
            "namespace": NAMESPACE,
            "boot_id": {"node": f"ns=2;s={attack}.BootId"},
            "channels": {
                "Trip": {
                    "transition_id": {"node": f"ns=2;s={attack}.Trip.TransitionId"},
                    "state": {"node": f"ns=2;s={attack}.Trip.State", "values": {0: "Normal", 1: "Trip"}},
                }
            },
        }
        for attack in attacks
    ]


async def _main(port: int, depth: int) -> None:
    server = HostileOpcUaServer(port=port, depth=depth)
    await server.start()
    print(f"READY {server.port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m devices.hostile_opcua", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--port", type=int, default=0, help="TCP port (0: any free one, printed)")
    parser.add_argument("--depth", type=int, default=100, help="nesting depth of the NESTED variant")
    args = parser.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), args.depth * 10 + 1000))  # to encode deep nesting
    asyncio.run(_main(args.port, args.depth))


if __name__ == "__main__":
    main()
