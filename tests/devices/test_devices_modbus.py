"""The Modbus simulator read with a plain pymodbus client: map, restart, ring, faults."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pymodbus.client import AsyncModbusTcpClient
from pymodbus.exceptions import ConnectionException, ModbusIOException

from devices.controller import Controller, ManualClock
from devices.modbus_map import RegisterMap
from devices.modbus_server import ModbusSimServer

pytestmark = pytest.mark.timeout(20)
DT: Any = AsyncModbusTcpClient.DATATYPE


def u32(regs: list[int], word_order: str = "big") -> int:
    """Decode with pymodbus itself, not with the simulator's encoder, so that the two check each other."""
    return int(AsyncModbusTcpClient.convert_from_registers(regs, DT.UINT32, word_order=word_order))


def u64(regs: list[int], word_order: str = "big") -> int:
    return int(AsyncModbusTcpClient.convert_from_registers(regs, DT.UINT64, word_order=word_order))


@pytest.fixture
async def server(pump: Controller) -> AsyncIterator[ModbusSimServer]:
    srv = ModbusSimServer(pump)
    await srv.start()
    yield srv
    await srv.stop()


async def connect(port: int, *, timeout: float = 1.0) -> AsyncModbusTcpClient:
    client = AsyncModbusTcpClient("127.0.0.1", port=port, timeout=timeout, retries=0, reconnect_delay=0)
    assert await client.connect()
    return client


async def read(client: AsyncModbusTcpClient, address: int, count: int) -> list[int]:
    rr = await client.read_holding_registers(address, count=count, device_id=1)
    assert not rr.isError(), rr
    return list(rr.registers)


@pytest.mark.parametrize("word_order", ["big", "little"])
def test_register_image_decodes_with_pymodbus_to_the_model(
    pump: Controller, clock: ManualClock, word_order: str
) -> None:
    pump.transition("Trip")
    clock.advance(17)
    pump.set_counter("Overload", 40000)
    pump.transition("Overload", 2)
    m = RegisterMap(pump, word_order)  # type: ignore[arg-type]
    img = m.encode()
    assert u32(img[0:2], word_order) == 17
    trip, ovl = m.channel_register(0), m.channel_register(1)
    assert (u32(img[trip : trip + 2], word_order), img[trip + 2]) == (1, 1)
    assert u64(img[trip + 3 : trip + 7], word_order) == pump.channel("Trip").source_time_ms
    assert (img[ovl], img[ovl + 2], u64(img[ovl + 3 : ovl + 7], word_order)) == (40001, 2, clock())
    r = m.ring_register
    assert (u32(img[r : r + 2], word_order), img[r + 2], img[r + 3]) == (2, 8, 12)
    slot = img[m.slots_register + 12 : m.slots_register + 24]
    assert u32(slot[0:2], word_order) == 2
    assert (slot[2], slot[3], u32(slot[4:6], word_order), u32(slot[6:8], word_order)) == (1, 2, 40001, 17)
    assert u64(slot[8:12], word_order) == clock()


async def test_one_read_of_boot_and_channels_matches_the_model(
    server: ModbusSimServer, pump: Controller
) -> None:
    pump.transition("Trip")
    pump.transition("Overload", 2)
    await server.sync()
    client = await connect(server.port)
    regs = await read(client, 0, 26)
    client.close()
    assert u32(regs[0:2]) == pump.boot_id == 17
    for i, base in enumerate((10, 18)):
        live = pump.channel(i)
        tid = u32(regs[base : base + 2]) if i == 0 else regs[base]
        assert (tid, regs[base + 2], u64(regs[base + 3 : base + 7])) == (1, live.state, live.source_time_ms)


async def test_input_registers_are_the_same_memory(server: ModbusSimServer, pump: Controller) -> None:
    pump.transition("Trip")
    await server.sync()
    client = await connect(server.port)
    rr = await client.read_input_registers(0, count=26, device_id=1)
    assert rr.registers == await read(client, 0, 26)
    client.close()


async def test_ring_of_two_boots_reads_in_one_request(server: ModbusSimServer, pump: Controller) -> None:
    for _ in range(3):
        pump.transition("Trip")
    boot = await server.restart()
    pump.transition("Trip")
    await server.sync()
    client = await connect(server.port)
    regs = await read(client, server.map.ring_register, server.map.ring_read_count)
    client.close()
    head, slots = u32(regs[0:2]), regs[4:]
    entries = [
        (
            u32(slots[k * 12 : k * 12 + 2]),
            u32(slots[k * 12 + 4 : k * 12 + 6]),
            u32(slots[k * 12 + 6 : k * 12 + 8]),
        )
        for k in range(head)
    ]
    assert head == 4
    assert entries == [(1, 1, 17), (2, 2, 17), (3, 3, 17), (4, 1, boot)]
    assert boot == 18


async def test_restart_drops_the_link_changes_boot_id_and_resets_counters(
    server: ModbusSimServer, pump: Controller
) -> None:
    pump.transition("Trip")
    await server.sync()
    links: list[bool] = []
    client = AsyncModbusTcpClient(
        "127.0.0.1", port=server.port, timeout=1, retries=0, reconnect_delay=0.1, trace_connect=links.append
    )
    assert await client.connect()
    port = server.port
    await server.restart()
    assert server.port == port
    for _ in range(50):
        await asyncio.sleep(0.05)
        if links[-1:] == [True] and len(links) >= 3:
            break
    regs = await read(client, 0, 14)
    client.close()
    assert links[:3] == [True, False, True]
    assert (u32(regs[0:2]), u32(regs[10:12]), regs[12]) == (18, 0, 0)


async def test_link_cut_drops_and_refuses_connections_then_accepts_again(server: ModbusSimServer) -> None:
    links: list[bool] = []
    client = AsyncModbusTcpClient(
        "127.0.0.1", port=server.port, timeout=0.5, retries=0, reconnect_delay=0, trace_connect=links.append
    )
    assert await client.connect()
    await server.cut_link()
    await asyncio.sleep(0.1)  # let the client's loop see the FIN
    assert server.connection_count == 0
    assert links == [True, False]
    with pytest.raises(ConnectionException):
        await client.read_holding_registers(0, count=2, device_id=1)
    assert not await AsyncModbusTcpClient("127.0.0.1", port=server.port, timeout=0.5, retries=0).connect()
    await server.restore_link()
    again = await connect(server.port)
    assert u32(await read(again, 0, 2)) == 17
    client.close()
    again.close()


async def test_half_open_keeps_the_session_but_never_answers(server: ModbusSimServer) -> None:
    client = await connect(server.port, timeout=0.3)
    server.half_open()
    started = time.monotonic()
    with pytest.raises(ModbusIOException):
        await client.read_holding_registers(0, count=2, device_id=1)
    assert time.monotonic() - started >= 0.25
    assert server.connection_count == 1
    await server.restore_link()
    fresh = await connect(server.port)
    assert u32(await read(fresh, 0, 2)) == 17
    client.close()
    fresh.close()


async def test_slow_responses_arrive_late_but_arrive(server: ModbusSimServer) -> None:
    client = await connect(server.port)
    server.set_delay(0.3)
    started = time.monotonic()
    assert u32(await read(client, 0, 2)) == 17
    assert time.monotonic() - started >= 0.3
    client.close()


async def test_exception_range_fails_only_requests_that_touch_it(server: ModbusSimServer) -> None:
    server.add_exception(18, 8, code=2)
    client = await connect(server.port)
    bad = await client.read_holding_registers(20, count=1, device_id=1)
    assert bad.isError() and bad.exception_code == 2
    assert len(await read(client, 10, 8)) == 8  # Trip still reads
    server.clear_exceptions()
    assert len(await read(client, 18, 8)) == 8
    client.close()


async def test_the_map_is_read_only_and_ends_where_documented(server: ModbusSimServer) -> None:
    client = await connect(server.port)
    wr = await client.write_register(10, 5, device_id=1)
    assert wr.isError() and wr.exception_code == 1
    past = await client.read_holding_registers(server.map.end, count=1, device_id=1)
    assert past.isError() and past.exception_code == 2
    client.close()


async def test_no_boot_id_means_registers_0_and_1_are_illegal(make_pump: Callable[..., Controller]) -> None:
    srv = ModbusSimServer(make_pump(boot_id_mode="none"))
    await srv.start()
    client = await connect(srv.port)
    rr = await client.read_holding_registers(0, count=2, device_id=1)
    assert rr.isError() and rr.exception_code == 2
    assert len(await read(client, 2, 24)) == 24
    client.close()
    await srv.stop()


async def test_little_word_order_swaps_words_of_multi_register_values(
    make_pump: Callable[..., Controller],
) -> None:
    pump = make_pump(boot_id_start=0x12345678)
    srv = ModbusSimServer(pump, word_order="little")
    await srv.start()
    client = await connect(srv.port)
    regs = await read(client, 0, 2)
    client.close()
    await srv.stop()
    assert regs == [0x5678, 0x1234]
    assert u32(regs, "little") == 0x12345678


async def test_every_ring_read_is_a_consistent_snapshot_under_load(
    server: ModbusSimServer, pump: Controller
) -> None:
    """Slots always hold exactly the entries head-capacity+1..head: one read never sees half a change."""
    stop = asyncio.Event()

    async def load() -> None:
        while not stop.is_set():
            pump.transition(pump.rng.randrange(2))
            await server.sync()
            await asyncio.sleep(0)

    task = asyncio.create_task(load())
    client = await connect(server.port)
    cap = pump.ring_capacity
    try:
        for _ in range(200):
            regs = await read(client, server.map.ring_register, server.map.ring_read_count)
            head = u32(regs[0:2])
            seqs = {u32(regs[4 + k * 12 : 6 + k * 12]) for k in range(cap)}
            assert seqs - {0} == set(range(max(1, head - cap + 1), head + 1))
    finally:
        stop.set()
        await task
        client.close()
    assert pump.head > 0
