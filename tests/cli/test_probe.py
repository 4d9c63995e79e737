"""`check --probe` tries everything configured: every node of each PLC (an unknown OPC UA node is
named, exit 69), an MQTT CONNECT with the credentials and TLS against a real Mosquitto, and an
HTTP POST of an empty batch with the token (no event is sent)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agent.cli.context import EX_UNAVAILABLE
from devices.controller import ChannelSpec, Controller
from devices.plant import Plant
from devices.upstream import Receiver

pytestmark = pytest.mark.timeout(90)
MOSQUITTO = shutil.which("mosquitto") or (
    "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None
)
PASSWD = shutil.which("mosquitto_passwd")


async def check_probe(tmp_path: Path, devices: list[dict[str, Any]], upstreams: list[Any]) -> tuple[int, str]:
    doc = {
        "site": "plant-1",
        "gateway": "gw",
        "store": {"path": str(tmp_path / "events.db")},
        "upstreams": upstreams,
        "devices": devices,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent", "check", "-c", str(path), "--probe", "--timeout", "10",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


@pytest.fixture
async def modbus_plant() -> AsyncIterator[Plant]:
    async with Plant([Controller("PUMP-07", [ChannelSpec("Trip")])], opcua_port=None) as plant:
        yield plant


async def test_an_unknown_opc_ua_node_is_named_and_exits_69(tmp_path: Path) -> None:
    async with Plant([Controller("COMP-02", [ChannelSpec("OverTemp")])], modbus_port=None) as plant:
        devices = plant.device_configs()
        good = devices[0]["channels"]["OverTemp"]["state"]["node"]
        code, out = await check_probe(tmp_path, devices, [])
        assert code == 0, out
        devices[0]["channels"]["OverTemp"]["state"]["node"] = "ns=2;s=COMP-02.NoSuchNode"
        code, out = await check_probe(tmp_path, devices, [])
    assert code == EX_UNAVAILABLE, out
    assert "FAIL COMP-02 via opcua:" in out
    assert "ns=2;s=COMP-02.NoSuchNode: BadNodeIdUnknown" in out and good not in out.split("FAIL")[1]


def _self_signed(tmp_path: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def tls_broker(tmp_path: Path) -> AsyncIterator[tuple[int, Path]]:
    """A private Mosquitto: TLS only (certificate for localhost), user gw with a password."""
    if MOSQUITTO is None or PASSWD is None:
        pytest.skip("mosquitto and mosquitto_passwd are not installed (apt-get install mosquitto)")
    cert, key = _self_signed(tmp_path, "localhost")
    passwords = tmp_path / "passwd"
    subprocess.run([PASSWD, "-b", "-c", str(passwords), "gw", "right-password"], check=True, timeout=10)
    port = _free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\ncertfile {cert}\nkeyfile {key}\nallow_anonymous false\n"
        f"password_file {passwords}\nuser {os.environ.get('USER', 'root')}\n"
        f"log_dest file {tmp_path / 'mosquitto.log'}\n",
        encoding="utf-8",
    )
    proc = await asyncio.create_subprocess_exec(
        MOSQUITTO, "-c", str(conf), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        async with asyncio.timeout(10):
            while True:
                try:
                    _, w = await asyncio.open_connection("127.0.0.1", port)
                    w.close()
                    break
                except OSError:
                    await asyncio.sleep(0.05)
        yield port, cert
    finally:
        proc.terminate()
        await proc.wait()


def _secret(tmp_path: Path, name: str, value: str) -> str:
    path = tmp_path / name
    path.write_text(value + "\n", encoding="utf-8")
    return str(path)


async def test_every_upstream_is_reached_with_its_credentials_and_tls_and_gets_no_event(
    tmp_path: Path, modbus_plant: Plant, tls_broker: tuple[int, Path]
) -> None:
    port, ca = tls_broker
    async with Receiver(token="right-token") as rx:
        mqtt = {
            "url": f"mqtts://localhost:{port}",
            "ca_file": str(ca),
            "username": "gw",
            "password_file": _secret(tmp_path, "pw", "right-password"),
        }
        token = _secret(tmp_path, "token", "right-token")
        ups = [
            {"name": "central", "mqtt": mqtt},
            {"name": "historian", "http": {"url": rx.url + "/ingest?key=query-secret", "token_file": token}},
        ]
        code, out = await check_probe(tmp_path, modbus_plant.device_configs(), ups)
        assert rx.events == []
    assert code == 0, out
    said = {
        "central": f"ok   upstream central (mqtts://localhost:{port}): MQTT 3.1.1 CONNECT accepted as gw, TLS; "
        "nothing published",
        "historian": "HTTP 200 to an empty batch: reachable, token accepted; no event sent",
    }
    for name, text in said.items():
        assert text in next(x for x in out.splitlines() if f"upstream {name}" in x), out
    assert "query-secret" not in out and "?key=***" in out
    assert "right-password" not in out and "right-token" not in out


async def test_each_upstream_that_refuses_is_named_and_the_probe_exits_69(
    tmp_path: Path, modbus_plant: Plant, tls_broker: tuple[int, Path]
) -> None:
    port, ca = tls_broker
    url = f"mqtts://localhost:{port}"
    right, wrong = _secret(tmp_path, "pw", "right-password"), _secret(tmp_path, "bad", "wrong-password")
    async with Receiver(token="right-token") as rx:
        ups = [
            {
                "name": "badpass",
                "mqtt": {"url": url, "ca_file": str(ca), "username": "gw", "password_file": wrong},
            },
            {"name": "untrusted", "mqtt": {"url": url, "username": "gw", "password_file": right}},
            {
                "name": "nobroker",
                "mqtt": {"url": f"mqtt://127.0.0.1:{_free_port()}", "connect_timeout": "2s"},
            },
            {"name": "badtoken", "http": {"url": rx.url + "/ingest", "token_file": wrong}},
        ]
        code, out = await check_probe(tmp_path, modbus_plant.device_configs(), ups)
        assert rx.events == []
    assert code == EX_UNAVAILABLE, out
    said = {
        "badpass": "MQTT CONNECT failed",
        "untrusted": "CERTIFICATE_VERIFY_FAILED",
        "nobroker": "MQTT CONNECT failed",
        "badtoken": "HTTP 401: the receiver refused the token",
    }
    for name, text in said.items():
        line = next(x for x in out.splitlines() if f"upstream {name}" in x)
        assert line.startswith("FAIL") and text in line, out
    assert "ok   PUMP-07 via modbus:" in out, out
    assert "wrong-password" not in out and "right-password" not in out
