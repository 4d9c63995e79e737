"""File paths in the config: ${VAR} references expanded, systemd credentials resolved through
the unit's LoadCredential= outside the unit, unknown variables named with file and line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agent.config import loader as config
from agent.config.path_env import PathEnv
from agent.config.unit import read_unit
from agent.config.upstreams import MqttUpstream

ROOT = Path(__file__).parents[2]


def write_config(tmp_path: Path, password_file: str) -> Path:
    doc = {
        "site": "plant-1",
        "gateway": "gw",
        "store": {"path": str(tmp_path / "events.db")},
        "upstreams": [
            {"name": "central", "mqtt": {"url": "mqtt://h", "username": "u", "password_file": password_file}}
        ],
        "devices": [
            {
                "name": "PUMP-07",
                "connections": [{"modbus": {"host": "127.0.0.1"}}],
                "channels": {
                    "Trip": {"transition_id": {"register": 10, "type": "uint32"}, "state": {"register": 12}}
                },
            }
        ],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("written", "env", "credentials", "expected"),
    [
        pytest.param("{d}/pw", {}, {}, "{d}/pw", id="a plain path stays"),
        pytest.param("${SECRETS}/pw", {"SECRETS": "{d}"}, {}, "{d}/pw", id="an environment variable"),
        pytest.param(
            "${CREDENTIALS_DIRECTORY}/mqtt-password",
            {"CREDENTIALS_DIRECTORY": "{d}/creds"},
            {"mqtt-password": "/nowhere"},
            "{d}/creds/mqtt-password",
            id="inside the unit: the directory systemd made",
        ),
        pytest.param(
            "${CREDENTIALS_DIRECTORY}/mqtt-password",
            {},
            {"mqtt-password": "{d}/src"},
            "{d}/src",
            id="outside the unit: the file LoadCredential= loads",
        ),
        pytest.param(
            "/run/credentials/edge-agent.service/mqtt-password",
            {},
            {"mqtt-password": "{d}/src"},
            "{d}/src",
            id="outside the unit: a literal /run/credentials path too",
        ),
    ],
)
def test_a_path_is_expanded(
    tmp_path: Path, written: str, env: dict[str, str], credentials: dict[str, str], expected: str
) -> None:
    d = str(tmp_path)
    for name in ("pw", "src", "creds/mqtt-password"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("s\n", encoding="utf-8")
    paths = PathEnv(
        {k: v.format(d=d) for k, v in env.items()},
        {k: v.format(d=d) for k, v in credentials.items()},
        "edge-agent.service",
    )
    cfg = config.load(write_config(tmp_path, written.replace("{d}", d)), paths=paths)
    up = cfg.upstreams[0]
    assert isinstance(up, MqttUpstream)
    assert up.password_file == expected.format(d=d)
    use = next(f for f in cfg.files if f.key == "upstreams[0].mqtt.password_file")
    assert use.secret and use.path == expected.format(d=d)
    assert (use.credential is not None) == ("CREDENTIALS" in written or "/run/credentials" in written)


@pytest.mark.parametrize(
    ("written", "paths", "message"),
    [
        pytest.param(
            "${NOPE}/pw", PathEnv({}), "${NOPE} is not set in the environment", id="unknown variable"
        ),
        pytest.param("${a-b}/pw", PathEnv({}), "${a-b} is not a variable name", id="not a name"),
        pytest.param(
            "${CREDENTIALS_DIRECTORY}/mqtt-password",
            PathEnv({}),
            "exist only inside the running unit; outside it, give --unit FILE",
            id="a credential with no unit known",
        ),
        pytest.param(
            "${CREDENTIALS_DIRECTORY}/mqtt-password",
            PathEnv({}, {"other": "/x"}, "/etc/systemd/system/edge-agent.service"),
            "/etc/systemd/system/edge-agent.service has no LoadCredential=mqtt-password:FILE",
            id="a credential the unit does not load",
        ),
    ],
)
def test_a_path_that_cannot_be_expanded_is_a_problem_with_file_and_line(
    tmp_path: Path, written: str, paths: PathEnv, message: str
) -> None:
    path = write_config(tmp_path, written)
    with pytest.raises(config.ConfigProblems) as err:
        config.load(path, paths=paths)
    line = next(i for i, x in enumerate(path.read_text().splitlines(), 1) if "password_file" in x)
    assert f"{path}:{line}: upstreams[0].mqtt.password_file: " in str(err.value)
    assert message in str(err.value)


def test_a_config_for_another_machine_keeps_its_paths_as_written(tmp_path: Path) -> None:
    cfg = config.load(write_config(tmp_path, "${NOPE}/pw"), check_files=False, paths=PathEnv({}))
    assert cfg.upstreams[0].password_file == "${NOPE}/pw"  # type: ignore[union-attr]


def test_an_unquoted_reference_in_a_flow_mapping_says_to_quote_it(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("site: p\nupstreams:\n  - {name: c, mqtt: {password_file: ${X}/pw}}\n", encoding="utf-8")
    with pytest.raises(config.ConfigProblems, match=r"quote a value with \$\{\.\.\.\} in it"):
        config.load(path)


def test_an_unreadable_file_is_not_called_missing(tmp_path: Path) -> None:
    """The loader reports only what is absent; who cannot read what is `check`'s and `run`'s."""
    secret = tmp_path / "pw"
    secret.write_text("s\n", encoding="utf-8")
    secret.chmod(0)
    cfg = config.load(write_config(tmp_path, str(secret)), paths=PathEnv({}))
    assert cfg.upstreams[0].password_file == str(secret)  # type: ignore[union-attr]


def test_the_example_config_passes_with_the_shipped_credentials_drop_in(tmp_path: Path) -> None:
    """Every secret the example names as a credential is loaded by systemd/credentials.conf."""
    unit = tmp_path / "edge-agent.service"
    unit.write_text((ROOT / "systemd" / "edge-agent.service").read_text(), encoding="utf-8")
    (tmp_path / "edge-agent.service.d").mkdir()
    drop_in = (ROOT / "systemd" / "credentials.conf").read_text()
    (tmp_path / "edge-agent.service.d" / "credentials.conf").write_text(drop_in, encoding="utf-8")
    u = read_unit(str(unit))
    cfg = config.load(
        ROOT / "config.example.yaml", check_files=False, paths=PathEnv({}, u.credentials, u.name)
    )
    used = {f.credential for f in cfg.files if f.credential}
    assert (
        used == set(u.credentials) == {"mqtt-password", "historian-token", "opcua-password", "opcua-key.pem"}
    )
