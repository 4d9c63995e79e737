"""A reload of `edge-agent run` against stacks no one here wrote: node-opcua and npm modbus-serial.

tests/e2e/test_reload.py reloads against our own pymodbus simulator; here the devices are
``peers/node/opcua_server.js`` (node-opcua 2.186.4: PLC-UA, polled reads, a ring of 32) and
``peers/node/modbus_tcp_server.js`` (modbus-serial 8.0.25: PUMP-07, a ring of 8), both making
transitions the whole time (about three a second each; PLC-UA ten across its restart). The agent
starts with PLC-UA only, then:

1. `edge-agent reload` adds PUMP-07: it starts, its boot and transitions land in the store, and
   PLC-UA is untouched (node-opcua saw no new session or secure channel, its live poll count went
   on, no resume logged for it).
2. PLC-UA's poll interval changes: only PLC-UA restarts (one new node-opcua session, resumed from
   its positions; modbus-serial accepted no new connection); nothing made across the restart is
   lost, and nothing is read twice.
3. A bad register type: `edge-agent reload` says it with file:line and sends nothing (exit 78);
   SIGHUP (as `systemctl reload` sends it): INVALID with file:line, nothing changes, both devices
   go on polling on the connections they had.
4. `edge-agent reload` removes PUMP-07: its connection closes, a transition made after it is not
   read, what it read is still in the store, PLC-UA untouched.
5. One reload brings PUMP-07 back and removes PLC-UA: node-opcua's session and channel close,
   PUMP-07 resumes from its positions and reads from its ring what it missed while away.

Every transition made while its device was configured is stored once, with no gap, reset or
overrun recorded; arrivals beyond one per transition are only the ring re-reads that
docs/pollers.md allows a resumed device. The connection counts come from the peers themselves
(each script's `count` command), not from the agent. Skips with the reason without Node.js or
the peers' node_modules. About 25 s on a loaded 2-core machine.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from agent_process import agent_env, connections, eventually, start_agent, status_when, stored

from devices.agent_config import device_config
from devices.controller import ChannelSpec, Controller
from devices.modbus_map import RegisterMap
from devices.opcua_nodes import NodeLayout
from devices.peers import node_missing
from devices.peers.modbus_peers import ModbusSerialTcp
from devices.peers.node_opcua import NodeOpcUa

pytestmark = pytest.mark.timeout(120)

UA, MB = "PLC-UA", "PUMP-07"
Key = tuple[str, str, str]
T = TypeVar("T")
RESUMED = re.compile(r"resuming device=(\S+) boot_id=17 positions=Trip:(\d+) ring_head=(\S+)")


def ua_entry(ctrl: Controller, server: NodeOpcUa, poll: str) -> dict[str, Any]:
    # 5 s read timeouts: a loaded machine can stall a process for over the default (1 s, 2 s),
    # and a read that times out reconnects, which is not what this test is about.
    opcua = {"endpoint": server.endpoint, "security": {"policy": "None"}, "timeout": "5s"}
    return device_config(ctrl, opcua=opcua, nodes=NodeLayout(ctrl), poll=poll)


def mb_entry(ctrl: Controller, server: ModbusSerialTcp) -> dict[str, Any]:
    modbus = {"host": "127.0.0.1", "port": server.port, "unit": 1, "timeout": "5s"}
    return device_config(ctrl, modbus=modbus, register_map=RegisterMap(ctrl), poll="100ms")


def write(config: Path, db: Path, devices: list[dict[str, Any]]) -> None:
    doc = {"site": "plant-1", "gateway": "gw-reload-peers", "store": {"path": str(db)}, "devices": devices}
    config.write_text(yaml.safe_dump(doc, sort_keys=False))


def reload_cli(config: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "agent", "reload", "-c", str(config), "--wait", "30"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=agent_env())


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as con:
        return con.execute(sql).fetchall()


def polls(status: dict[str, Any], device: str) -> int:
    return int(connections(status)[device]["polls"])


def last_reload(status: dict[str, Any]) -> dict[str, Any]:
    return dict((status["service"] or {}).get("last_reload") or {})


async def settled(ask: Callable[[], Awaitable[T]], check: Callable[[T], bool], timeout: float = 15.0) -> T:
    """A peer's count, asked again until `check` holds (a server sees a close a moment after the
    client made it), or as it last was after `timeout`: the assertions say what it should be."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check(value := await ask()) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
    return value


async def test_reload_against_node_opcua_and_modbus_serial_touches_only_what_changed(tmp_path: Path) -> None:
    for package in ("node-opcua-server", "modbus-serial"):
        if (why := node_missing(package)) is not None:
            pytest.skip(why)
    ua_ctrl = Controller(UA, [ChannelSpec("Trip")], ring_capacity=32)
    mb_ctrl = Controller(MB, [ChannelSpec("Trip")], ring_capacity=8)
    ua, mb = NodeOpcUa(UA, str(tmp_path / "pki"), ring=32), ModbusSerialTcp(mb_ctrl)
    config, db, log = tmp_path / "config.yaml", tmp_path / "events.db", tmp_path / "agent.log"
    made: set[Key] = set()  # every transition made while its device is in the configuration
    mb_polled = asyncio.Event()  # PUMP-07 is in the configuration: its transitions count
    fast = asyncio.Event()  # PLC-UA's transitions ten a second (across its restart)
    done = asyncio.Event()

    async def make_transitions() -> None:
        while not done.is_set():
            made.update((f"{UA}/Trip", str(t), "17") for t in await ua.burst(1))
            if mb_polled.is_set():
                entry = mb_ctrl.transition("Trip")
                await mb.sync()
                made.add((f"{MB}/Trip", str(entry.transition_id), str(entry.boot_id)))
            await asyncio.sleep(0.1 if fast.is_set() else 0.3)

    await asyncio.gather(ua.start(), mb.start())
    agent: asyncio.subprocess.Process | None = None
    loading: asyncio.Task[None] | None = None
    code: int | None = None
    try:
        ua_only = [ua_entry(ua_ctrl, ua, "100ms")]
        both = [ua_entry(ua_ctrl, ua, "100ms"), mb_entry(mb_ctrl, mb)]
        write(config, db, ua_only)
        agent = await start_agent(config, log)
        await eventually(lambda: db.exists() and "started" in log.read_text())
        started = await status_when(config, lambda s: connections(s).get(UA, {}).get("state") == "up")
        loading = asyncio.create_task(make_transitions())
        await eventually(lambda: len(stored(db)) >= 3)

        # 1. PUMP-07 added (on modbus-serial); PLC-UA untouched.
        ua_before, ua_polls = await ua.clients(), polls(await status_when(config, lambda s: True), UA)
        write(config, db, both)
        added = await asyncio.to_thread(reload_cli, config)
        mb_polled.set()
        first = await status_when(
            config, lambda s: connections(s).get(MB, {}).get("state") == "up" and polls(s, UA) > ua_polls
        )
        await eventually(lambda: any(k[0] == f"{MB}/Trip" for k in stored(db)))
        ua_after_add = await ua.clients()
        mb_after_add = await mb.connections()

        # 2. PLC-UA's poll interval 100ms -> 150ms: only PLC-UA restarts, its transitions ten a
        # second before, during and after (its ring of 32 holds a 3 s outage; PUMP-07's go on too).
        fast.set()
        await asyncio.sleep(1.0)
        write(config, db, [ua_entry(ua_ctrl, ua, "150ms"), mb_entry(mb_ctrl, mb)])
        changed = await asyncio.to_thread(reload_cli, config)
        await asyncio.sleep(1.0)
        fast.clear()
        await asyncio.sleep(1.0)
        ua_after_change, mb_after_change = await ua.clients(), await mb.connections()
        mb_polls = polls(await status_when(config, lambda s: True), MB)

        # 3. A bad register type: the command sends nothing; SIGHUP: INVALID with file:line, nothing changes.
        good = config.read_text()
        bad_line = good[: good.index("type: uint16")].count("\n") + 1
        config.write_text(good.replace("type: uint16", "type: uint17", 1))
        refused_here = await asyncio.to_thread(reload_cli, config)  # the command checks first
        agent.send_signal(signal.SIGHUP)
        invalid = await status_when(config, lambda s: last_reload(s).get("result") == "invalid")
        kept = await status_when(config, lambda s: polls(s, MB) > mb_polls + 10)
        ua_after_invalid, mb_after_invalid = await ua.clients(), await mb.connections()
        config.write_text(good)

        # 4. PUMP-07 removed: it stops; what it read stays.
        mb_polled.clear()
        await asyncio.sleep(1.0)  # its last transition polled before it goes
        mb_read = {k for k in stored(db) if k[0] == f"{MB}/Trip"}
        write(config, db, [ua_entry(ua_ctrl, ua, "150ms")])
        removed = await asyncio.to_thread(reload_cli, config)
        mb_after_remove = await settled(mb.connections, lambda c: c[1] == 0)
        entry = mb_ctrl.transition("Trip")  # made while PUMP-07 is not polled: its ring keeps it
        await mb.sync()
        away = (f"{MB}/Trip", str(entry.transition_id), str(entry.boot_id))
        after = await status_when(config, lambda s: polls(s, UA) > polls(kept, UA) + 10)
        done.set()
        await loading
        await eventually(lambda: made <= set(stored(db)), timeout=30)
        while_away = set(stored(db))
        ua_after_remove = await ua.clients()

        # 5. One reload: PUMP-07 back (it resumes where it stood), PLC-UA removed.
        write(config, db, [mb_entry(mb_ctrl, mb)])
        swapped = await asyncio.to_thread(reload_cli, config)
        ua_gone = await settled(ua.clients, lambda c: c["sessions_open"] == c["channels_open"] == 0)
        made.add(away)
        entry = mb_ctrl.transition("Trip")
        await mb.sync()
        made.add((f"{MB}/Trip", str(entry.transition_id), str(entry.boot_id)))
        ua_unread = {(f"{UA}/Trip", str(t), "17") for t in await ua.burst(1)}
        await eventually(lambda: made <= set(stored(db)), timeout=30)
        await asyncio.sleep(1.0)  # a late read of PLC-UA would have landed by now
        mb_back = await mb.connections()
    finally:
        done.set()
        if loading is not None and not loading.done():  # a failure above: no burst to a stopped peer
            loading.cancel()
        if agent is not None:
            agent.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.wait_for(agent.wait(), 40)
            except TimeoutError:  # a stop that hangs fails the test below, and leaves no process
                agent.kill()
                await agent.wait()
        await asyncio.gather(ua.stop(), mb.stop())
    text = log.read_text()
    assert code == 0, text[-3000:]
    events = stored(db)
    figures = {
        "ua_clients": [ua_before, ua_after_add, ua_after_change, ua_after_invalid, ua_after_remove, ua_gone],
        "mb_connections": [mb_after_add, mb_after_change, mb_after_invalid, mb_after_remove, mb_back],
        "events": len(events),
        "read_again": rows(
            db, "SELECT source, count(*) FROM arrivals WHERE decision != 'inserted' GROUP BY 1"
        ),
    }
    print(json.dumps(figures))

    # 1. Added: PUMP-07 started on modbus-serial and its boot is in the store; PLC-UA kept its
    # node-opcua session and secure channel (none opened since), its polls went on, no resume.
    assert added.returncode == 0 and "reload applied at " in added.stdout, added.stdout + added.stderr
    assert f"devices: +{MB}, 1 unchanged" in added.stdout, added.stdout
    assert ua_after_add == ua_before and ua_before["sessions_open"] == 1, figures
    assert mb_after_add[1] == 1, figures
    assert [r[0] for r in rows(db, f"SELECT boot_id FROM boots WHERE device = '{MB}'")] == ["17"]
    assert connections(first)[UA]["polls"] > ua_polls
    assert first["service"]["config_hash"] != started["service"]["config_hash"]

    # 2. Changed: PLC-UA restarted (one new session, resumed from its positions), PUMP-07 not.
    assert changed.returncode == 0 and f"devices: ~{UA}, 1 unchanged" in changed.stdout, changed.stdout
    assert ua_after_change["sessions"] == ua_after_add["sessions"] + 1, figures
    assert ua_after_change["sessions_open"] == 1, figures
    assert mb_after_change == mb_after_add, figures
    assert text.count(f"resuming device={UA} ") == 1, "PLC-UA resumed once, at its own change"

    # 3. Invalid: said with file:line, the configuration in force kept, no connection touched.
    assert refused_here.returncode == 78, refused_here.stdout + refused_here.stderr
    assert (
        "nothing sent to the service" in refused_here.stderr
        and f"{config}:{bad_line}:" in refused_here.stderr
    )
    problems = last_reload(invalid)["problems"]
    assert any(f"{config}:{bad_line}" in p and "uint17" in p for p in problems), problems
    assert invalid["service"]["config_hash"] == kept["service"]["config_hash"]
    refusals = [
        line for line in text.splitlines() if "reload refused, the configuration in force is kept" in line
    ]
    assert any(f"{config}:{bad_line}: devices[1]" in line for line in refusals), refusals
    assert (ua_after_invalid, mb_after_invalid) == (ua_after_change, mb_after_change), figures

    # 4. Removed: PUMP-07's connection closed, nothing read after, what it read kept; PLC-UA untouched.
    assert removed.returncode == 0 and f"devices: -{MB}, 1 unchanged" in removed.stdout, removed.stdout
    assert mb_after_remove == (mb_after_change[0], 0), figures
    assert set(connections(after)) == {UA}
    assert mb_read and mb_read <= set(events)
    assert away not in while_away, "a removed device reads nothing more"
    assert ua_after_remove == ua_after_change, figures

    # 5. PLC-UA removed: its node-opcua session and channel closed, nothing read after, what it read
    # kept; PUMP-07 back on one new connection, from its positions: what it missed read once, no gap.
    assert swapped.returncode == 0 and f"devices: +{MB} -{UA}, 0 unchanged" in swapped.stdout, swapped.stdout
    assert ua_gone == {**ua_after_remove, "sessions_open": 0, "channels_open": 0}, figures
    assert mb_back == (mb_after_remove[0] + 1, 1), figures
    assert text.count(f"resuming device={MB} ") == 1, "PUMP-07 resumed once, when it came back"
    assert not ua_unread & set(events), "a removed device reads nothing more"
    assert {k for k in while_away if k[0] == f"{UA}/Trip"} <= set(events)

    # Across all five: every transition stored once, nothing named missing. Read again only what
    # docs/pollers.md ("Resume from the store") says a resumed device reads again: ring entries
    # newer than the recorded ring head that were read live before its stop (`duplicate`s;
    # with one channel a ring entry's seq is its transitionId). No live read is ever repeated.
    assert made == set(events) and all(n == 1 for n in events.values()), sorted(set(events) ^ made)
    inserted = rows(db, "SELECT count(*) FROM arrivals WHERE decision = 'inserted'")
    assert inserted == [(len(events),)], rows(db, "SELECT decision, count(*) FROM arrivals GROUP BY 1")
    resumed = {d: (int(head) if head.isdigit() else 0, int(tid)) for d, tid, head in RESUMED.findall(text)}
    again = rows(
        db, "SELECT source, transition_id, live, decision FROM arrivals WHERE decision != 'inserted'"
    )

    def as_documented(source: str, tid: str, live: int, decision: str) -> bool:
        head, position = resumed.get(source.split("/")[0], (0, 0))
        return decision == "duplicate" and live == 0 and head < int(tid) <= position

    assert all(as_documented(*r) for r in again), (again, resumed)
    assert rows(db, "SELECT source, kind, from_value, to_value FROM anomalies") == []
    assert len(rows(db, "SELECT * FROM boots")) == 2, "one boot per device: no restart seen as a reboot"
