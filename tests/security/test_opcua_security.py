"""OPC UA security: secure by default in the config, a trust list and no trust on first use,
and `edge-agent certs` making our certificate (against the simulator's secure endpoint)."""

from __future__ import annotations

import logging
import shutil
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from click.testing import CliRunner

from agent.cli.main import cli
from agent.config import loader as config
from agent.core.errors import SourceUnavailable
from agent.sources.opcua.poller import OpcUaSource
from agent.sources.opcua.trust import describe, read_certificate
from devices.controller import ChannelSpec, Controller
from devices.opcua_server import OpcUaSecurity
from devices.pki import TestPki, make_test_pki
from devices.plant import Plant

pytestmark = pytest.mark.timeout(60)


def load_with(tmp_path: Path, opcua: dict[str, Any]) -> config.Config:
    doc = {
        "site": "plant-1",
        "gateway": "gw-test",
        "store": {"path": str(tmp_path / "s.db")},
        "devices": [
            {
                "name": "COMP-02",
                "connections": [{"opcua": {"endpoint": "opc.tcp://127.0.0.1:4840", **opcua}}],
                "channels": {"T": {"transition_id": {"node": "ns=2;s=T"}, "state": {"node": "ns=2;s=S"}}},
            }
        ],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return config.load(path, check_files=False)


SECURE = {"certificate": "a.der", "private_key": "a.pem", "trusted": "pki/trusted"}


@pytest.mark.parametrize(
    ("opcua", "message"),
    [
        pytest.param(
            {}, "security: missing: OPC UA is secure by default", id="no security section is secure, not open"
        ),
        pytest.param(
            {"security": {"policy": "Basic128Rsa15", **SECURE}},
            "Basic128Rsa15 is deprecated by the OPC Foundation",
            id="Basic128Rsa15 is refused as deprecated",
        ),
        pytest.param(
            {"security": {"policy": "Basic256", **SECURE}},
            "Basic256 is deprecated by the OPC Foundation",
            id="Basic256 is refused as deprecated",
        ),
        pytest.param(
            {"security": {"policy": "Basic256Sha256", "certificate": "a.der", "private_key": "a.pem"}},
            "there is no trust on first use",
            id="a secure connection without a trust list is refused",
        ),
        pytest.param(
            {"security": {"policy": "Aes128_Sha256_RsaOaep", "trusted": "t"}},
            "our certificate and private_key are needed",
            id="a secure connection without our certificate is refused",
        ),
        pytest.param(
            {"security": {"policy": "None", "mode": "SignAndEncrypt"}},
            "must be left out with policy None",
            id="policy None with a signing mode is a contradiction",
        ),
        pytest.param(
            {"security": {"policy": "None"}, "username": "u", "password_file": "p"},
            "would travel in clear",
            id="a password over policy None is refused",
        ),
    ],
)
def test_the_config_refuses_what_is_not_secure_or_not_said(
    tmp_path: Path, opcua: dict[str, Any], message: str
) -> None:
    with pytest.raises(config.ConfigProblems) as err:
        load_with(tmp_path, opcua)
    assert message in str(err.value)
    assert "config.yaml:" in str(err.value)  # every problem names the file and line


@pytest.mark.parametrize(
    ("security", "policy", "mode"),
    [
        pytest.param({"policy": "None"}, "None", "None", id="policy None is accepted when written out"),
        pytest.param(
            SECURE, "Basic256Sha256", "SignAndEncrypt", id="the default is SignAndEncrypt with Basic256Sha256"
        ),
        pytest.param(
            {"policy": "Aes256_Sha256_RsaPss", "mode": "Sign", **SECURE},
            "Aes256_Sha256_RsaPss",
            "Sign",
            id="the Aes policies are accepted",
        ),
    ],
)
def test_the_config_accepts_secure_policies_and_an_explicit_none(
    tmp_path: Path, security: dict[str, Any], policy: str, mode: str
) -> None:
    conn = load_with(tmp_path, {"security": security}).devices[0].connections[0]
    assert conn.security.policy == policy and conn.security.mode == mode  # type: ignore[union-attr]


def test_policy_none_is_warned_about_when_the_source_is_built(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dev = load_with(tmp_path, {"security": {"policy": "None"}}).devices[0]
    with caplog.at_level(logging.WARNING, logger="agent.sources.opcua.poller"):
        OpcUaSource(dev, dev.connections[0])  # type: ignore[arg-type]
    assert "security policy None (configured explicitly)" in caplog.text


# --- against the simulator's Basic256Sha256 SignAndEncrypt endpoint -------------------------------


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`edge-agent certs` output: our certificate and key in a fresh directory."""
    folder = tmp_path_factory.mktemp("agent-pki") / "pki"
    result = CliRunner().invoke(cli, ["certs", "--dir", str(folder), "--gateway", "gw-test"])
    assert result.exit_code == 0, result.output
    return folder, result.output


def test_certs_makes_a_key_only_we_can_read_and_prints_the_thumbprint(made: tuple[Path, str]) -> None:
    folder, output = made
    key, cert = folder / "agent_key.pem", folder / "agent_cert.der"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    info = describe(read_certificate(cert))
    assert info.uri == "urn:edge-agent:gw-test"
    assert info.thumbprint in output and str(key) in output and "urn:edge-agent:gw-test" in output
    again = CliRunner().invoke(cli, ["certs", "--dir", str(folder), "--gateway", "gw-test"])
    assert again.exit_code == 1 and "--force" in again.output  # never overwritten by accident


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def plant(
    made: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Plant, TestPki]]:
    pki = await make_test_pki(tmp_path_factory.mktemp("sim-pki"))
    shutil.copy(made[0] / "agent_cert.der", pki.trusted_dir / "edge-agent.der")  # the PLC admin's step
    security = OpcUaSecurity(
        policies=("Basic256Sha256_SignAndEncrypt",),
        certificate=pki.server.certificate,
        private_key=pki.server.private_key,
        trusted_dir=pki.trusted_dir,
    )
    async with Plant(
        [Controller("PUMP-07", [ChannelSpec("Trip")])], modbus_port=None, security=security
    ) as p:
        await p.transition("PUMP-07", "Trip")
        yield p, pki


def source(tmp_path: Path, plant: Plant, made: Path, trust: dict[str, str]) -> OpcUaSource:
    entry = plant.device_configs()[0]
    entry["connections"][0]["opcua"]["security"].update(
        certificate=str(made / "agent_cert.der"), private_key=str(made / "agent_key.pem"), **trust
    )
    doc = {
        "site": "plant-1",
        "gateway": "gw-test",
        "store": {"path": str(tmp_path / "s.db")},
        "devices": [entry],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    dev = config.load(path).devices[0]
    return OpcUaSource(dev, dev.connections[0])  # type: ignore[arg-type]


@pytest.mark.asyncio(loop_scope="module")
async def test_a_server_in_the_trusted_directory_is_read_with_our_certificate(
    tmp_path: Path, plant: tuple[Plant, TestPki], made: tuple[Path, str]
) -> None:
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    shutil.copy(plant[1].server.certificate, trusted / "plc.der")
    src = source(tmp_path, plant[0], made[0], {"trusted": str(trusted)})
    try:
        await src.connect()
        obs = await src.poll()
    finally:
        await src.close()
    assert [(d.source, d.transition_id) for d in obs.deliveries] == [("PUMP-07/Trip", "1")]


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(
    "how",
    [
        pytest.param("trusted", id="a server whose certificate is not in the trusted directory is refused"),
        pytest.param("server_certificate", id="a server whose certificate is not the pinned one is refused"),
    ],
)
async def test_an_unknown_server_certificate_is_refused_and_shown(
    tmp_path: Path, plant: tuple[Plant, TestPki], made: tuple[Path, str], how: str
) -> None:
    other = plant[1].untrusted_client.certificate  # some other certificate: not the server's
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    shutil.copy(other, trusted / "someone.der")
    trust = {"trusted": str(trusted)} if how == "trusted" else {"server_certificate": str(other)}
    src = source(tmp_path, plant[0], made[0], trust)
    with pytest.raises(SourceUnavailable) as err:
        await src.connect()
    await src.close()
    server = describe(read_certificate(plant[1].server.certificate))
    text = str(err.value)
    assert "server certificate is not trusted" in text and "no trust on first use" in text
    assert server.thumbprint in text and server.subject in text
