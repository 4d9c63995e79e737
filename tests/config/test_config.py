"""The configuration loader: golden bad-config folders, the example config, devices.d, `check`."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from agent.cli.main import cli
from agent.config import loader as config
from agent.config.path_env import PathEnv
from agent.config.sources import ModbusRtu, ModbusTcp, OpcUa
from devices.controller import ChannelSpec, Controller
from devices.plant import Plant

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
CASES = sorted(p for p in (HERE / "cases").iterdir() if p.is_dir())


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name.replace("-", " ")) for c in CASES])
def test_a_bad_config_is_refused_with_file_line_and_key(case: Path, tmp_path: Path) -> None:
    work = tmp_path / case.name
    shutil.copytree(case, work)
    with pytest.raises(config.ConfigProblems) as err:
        config.load(work / "config.yaml")
    for expected in (case / "expected.txt").read_text(encoding="utf-8").splitlines():
        if expected:
            assert expected in str(err.value)


def test_the_example_config_loads_with_every_kind_of_connection() -> None:
    cfg = config.load(ROOT / "config.example.yaml", check_files=False)
    kinds = {type(c) for d in cfg.devices for c in d.connections}
    assert kinds == {ModbusTcp, ModbusRtu, OpcUa}
    assert [d.name for d in cfg.devices] == ["PUMP-07", "FAN-01", "COMP-02", "PRESS-04"]
    assert [u.name for u in cfg.upstreams] == ["central", "historian"]
    press = cfg.devices[3]
    assert len(press.connections) == 2 and press.poll == 0.25
    assert cfg.devices[2].channels[0].time_from_state


def test_the_example_config_refuses_missing_secret_files_when_they_are_checked() -> None:
    with pytest.raises(config.ConfigProblems) as err:
        config.load(ROOT / "config.example.yaml", paths=PathEnv({}))
    assert "upstreams[0].mqtt.ca_file: file /etc/edge-agent/ca.crt does not exist" in str(err.value)
    assert "upstreams[0].mqtt.password_file: ${CREDENTIALS_DIRECTORY}/mqtt-password: systemd" in str(
        err.value
    )


async def test_the_snippet_the_simulators_emit_loads_as_one_file_per_plc(tmp_path: Path) -> None:
    ctrls = [Controller("PUMP-07", [ChannelSpec("Trip")]), Controller("FAN-01", [ChannelSpec("Fan")])]
    async with Plant(ctrls, opcua_port=None) as plant:
        entries = plant.device_configs()
    (tmp_path / "devices.d").mkdir()
    for entry in entries:
        (tmp_path / "devices.d" / f"{entry['name']}.yaml").write_text(yaml.safe_dump(entry), encoding="utf-8")
    main = tmp_path / "config.yaml"
    main.write_text("site: plant-1\ngateway: gw\nstore: {path: /tmp/x.db}\n", encoding="utf-8")
    cfg = config.load(main)
    assert sorted(d.name for d in cfg.devices) == ["FAN-01", "PUMP-07"]
    pump = next(d for d in cfg.devices if d.name == "PUMP-07")
    assert pump.boot_id is not None and pump.boot_id.register == 0
    assert pump.ring is not None and pump.ring.read == (100, 100)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("250ms", 0.25, id="milliseconds"),
        pytest.param("5s", 5.0, id="seconds"),
        pytest.param("2m", 120.0, id="minutes"),
        pytest.param("1.5s", 1.5, id="a fraction"),
    ],
)
def test_durations_carry_units(text: str, seconds: float) -> None:
    assert config.parse_duration(text) == seconds


@pytest.mark.parametrize("bad", [pytest.param(250, id="a bare number"), pytest.param("5 sec", id="a word")])
def test_a_duration_without_a_known_unit_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        config.parse_duration(bad)


def test_check_exits_78_and_lists_every_problem() -> None:
    result = CliRunner().invoke(
        cli, ["check", "-c", str(HERE / "cases" / "every-problem-at-once" / "config.yaml")]
    )
    assert result.exit_code == 78
    assert "3 problems" in result.output


def test_check_accepts_the_example() -> None:
    assert CliRunner().invoke(cli, ["check", "--help"]).exit_code == 0


@pytest.mark.timeout(30)
async def test_check_probe_reads_every_device_once_and_says_what_it_saw(tmp_path: Path) -> None:
    ctrl = Controller("PUMP-07", [ChannelSpec("Trip")])
    async with Plant([ctrl], opcua_port=None) as plant:
        await plant.transition("PUMP-07", "Trip")
        doc = {
            "site": "plant-1",
            "gateway": "gw",
            "store": {"path": str(tmp_path / "s.db")},
            "devices": plant.device_configs(),
        }
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        from agent.cli.check import _probe_all

        cfg = config.load(path)
        assert await _probe_all(cfg, 3.0)
        await plant.cut_link("PUMP-07")
        assert not await _probe_all(cfg, 3.0)


def test_an_alarms_only_device_loads_with_every_default_and_needs_no_channels(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "site: plant-1\ngateway: gw\nstore: {path: /tmp/x.db}\ndevices:\n"
        "  - name: PLC-1\n"
        "    connections: [{opcua: {endpoint: 'opc.tcp://10.0.0.9:4840', security: {policy: None}}}]\n"
        "    alarms: {}\n",
        encoding="utf-8",
    )
    [dev] = config.load(path).devices
    assert dev.channels == () and dev.boot_id is None
    assert dev.alarms is not None
    assert (
        dev.alarms.notifier,
        dev.alarms.template,
        dev.alarms.types,
        dev.alarms.channel,
        dev.alarms.queue,
    ) == (
        "i=2253",
        "{SourceName}.{ConditionName}",
        ("i=2915",),
        "alarms",
        1000,
    )
