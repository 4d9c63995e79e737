"""Our Modbus TCP client (agent.sources.modbus.tcp_client, issue 35) against servers no one here
wrote: pymodbus' own server (every read compared with pymodbus' own client's answer) and npm
modbus-serial's TCP server (registers and exception answers; skipped without Node.js)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
import pytest_asyncio
from pymodbus.client import AsyncModbusTcpClient
from pymodbus.server import ModbusTcpServer
from pymodbus.simulator import DataType, SimData, SimDevice

from agent.sources.modbus.frames import FrameError
from agent.sources.modbus.tcp_client import ModbusTcpClient, NoAnswer
from devices.controller import ChannelSpec, Controller
from devices.peers import node_missing
from devices.peers.modbus_peers import ModbusSerialTcp

pytestmark = pytest.mark.timeout(60)
logging.getLogger("pymodbus").setLevel(logging.CRITICAL)

IMAGE = [random.Random(35).randrange(0x10000) for _ in range(300)]


@pytest_asyncio.fixture
async def pymodbus_server() -> AsyncIterator[tuple[Any, int]]:
    device = SimDevice(1, [SimData(0, count=len(IMAGE), values=IMAGE, datatype=DataType.REGISTERS)])
    server = ModbusTcpServer(device, address=("127.0.0.1", 0))
    await server.serve_forever(background=True)
    port = int(cast(Any, server.transport).sockets[0].getsockname()[1])
    try:
        yield server, port
    finally:
        await server.shutdown()


READS = [(fc, start, count) for fc in (1, 2, 3, 4) for start, count in ((0, 1), (3, 17), (250, 50), (1, 125))]


async def test_every_read_answers_what_pymodbus_own_client_reads(pymodbus_server: tuple[Any, int]) -> None:
    _, port = pymodbus_server
    ours = ModbusTcpClient("127.0.0.1", port=port, timeout=2)
    theirs = AsyncModbusTcpClient("127.0.0.1", port=port, timeout=2, retries=0, reconnect_delay=0)
    assert await ours.connect() and await theirs.connect()
    names = {
        1: "read_coils",
        2: "read_discrete_inputs",
        3: "read_holding_registers",
        4: "read_input_registers",
    }
    try:
        for fc, start, count in READS:
            got = await getattr(ours, names[fc])(start, count=count, device_id=1)
            want = await getattr(theirs, names[fc])(start, count=count, device_id=1)
            assert got.isError() == want.isError(), (fc, start, count)
            if want.isError():
                assert got.exception_code == want.exception_code
            elif fc in (1, 2):
                assert got.values[:count] == [int(b) for b in want.bits[:count]], (fc, start, count)
            else:
                assert got.values == want.registers, (fc, start, count)
        assert len(READS) == 16  # all on one connection, one request in flight at a time
    finally:
        ours.close()
        theirs.close()


async def test_no_answer_times_out_and_the_client_is_not_used_again() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # a half-open link: the request is taken, no answer ever comes
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = ModbusTcpClient("127.0.0.1", port=port, timeout=0.3)
    try:
        assert await client.connect()
        with pytest.raises(NoAnswer, match=r"no answer within 0\.3 s"):
            await client.read_holding_registers(0, count=1, device_id=1)
        with pytest.raises(ConnectionError, match="not trusted"):
            await client.read_holding_registers(0, count=1, device_id=1)
    finally:
        client.close()
        server.close()
        await server.wait_closed()


async def test_a_server_gone_mid_connection_and_a_refused_connect(pymodbus_server: tuple[Any, int]) -> None:
    server, port = pymodbus_server
    client = ModbusTcpClient("127.0.0.1", port=port, timeout=1)
    assert await client.connect()
    await server.shutdown()
    with pytest.raises((ConnectionError, NoAnswer, FrameError)):
        await client.read_holding_registers(0, count=1, device_id=1)
    client.close()
    assert not await ModbusTcpClient("127.0.0.1", port=port, timeout=1).connect()


@pytest_asyncio.fixture
async def node_peer() -> AsyncIterator[ModbusSerialTcp]:
    if (why := node_missing("modbus-serial")) is not None:
        pytest.skip(why)
    server = ModbusSerialTcp(Controller("PUMP-07", [ChannelSpec("Trip")]))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_modbus_serial_registers_and_exception_answers(node_peer: ModbusSerialTcp) -> None:
    await node_peer.command("regs 1000 " + " ".join(str(v) for v in IMAGE[:125]))
    client = ModbusTcpClient("127.0.0.1", port=node_peer.port, timeout=2)
    assert await client.connect()
    try:
        assert (await client.read_holding_registers(1000, count=125, device_id=1)).values == IMAGE[:125]
        assert (await client.read_input_registers(1003, count=17, device_id=1)).values == IMAGE[3:20]
        for code in (2, 10, 11):
            await node_peer.command(f"exception 1010 1 {code}")
            got = await client.read_holding_registers(1000, count=17, device_id=1)
            assert (got.function_code, got.exception_code) == (0x83, code)
        await node_peer.command("clear")
        assert (await client.read_holding_registers(1010, count=1, device_id=1)).values == [IMAGE[10]]
        assert await node_peer.connections() == (1, 1)  # one connection for every read and answer
    finally:
        client.close()
