"""Secrets only from files (never the command line, the environment or the logs), TLS 1.2+ with
host name checks and a pinned CA, and a store file nobody else can read."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import re
import socket
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agent.config.upstreams import HttpUpstream, MqttUpstream
from agent.sinks.mqtt import MqttSink
from agent.sinks.tls import tls_context
from agent.store.store import Store

pytestmark = pytest.mark.timeout(30)
AGENT = Path(__file__).parents[2] / "agent"
SECRET = "hunter2-do-not-log"


def test_no_secret_is_taken_from_the_command_line_or_the_environment() -> None:
    offenders = []
    for path in AGENT.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"(click\.option\([^)]*|environ(?:\.get)?\(?[^)\n]*)", text):
            if re.search(r"password|token|secret|passphrase", m.group(0), re.IGNORECASE):
                offenders.append(f"{path.name}: {m.group(0)[:80]}")
    assert offenders == []


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("mqtts://agent:s3cret@broker:8883", id="a password in an MQTT url is refused"),
        pytest.param("https://agent:s3cret@historian/ingest", id="a password in an HTTP url is refused"),
    ],
)
def test_a_password_in_a_url_is_a_config_problem(url: str) -> None:
    up = MqttUpstream("central", url) if url.startswith("mqtt") else HttpUpstream("historian", url)
    assert "url: must not carry a password; use password_file / token_file" in up.problems()


async def test_the_mqtt_password_is_in_no_log_line_and_no_repr(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = tmp_path / "mqtt-password"
    secret.write_text(SECRET + "\n", encoding="utf-8")
    with socket.socket() as s:  # a port nothing listens on: the connect fails and is logged
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    up = MqttUpstream(
        "central", f"mqtt://127.0.0.1:{port}", username="gw", password_file=str(secret), connect_timeout_s=1
    )
    sink = MqttSink(up, site="plant-1", gateway="gw-test")
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(Exception) as err:
            await sink._connect()
        logging.getLogger("agent.test").error("connect failed: %r", err.value)
    seen = caplog.text + repr(up) + repr(sink) + repr(vars(sink)) + str(err.value)
    assert SECRET not in seen
    await sink.close()


def _cert(tmp_path: Path, name: str) -> tuple[Path, Path]:
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


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
@pytest.mark.parametrize(
    ("server_name", "max_version", "ok"),
    [
        pytest.param(
            "localhost", ssl.TLSVersion.TLSv1_3, True, id="the pinned CA and the right host name connect"
        ),
        pytest.param(
            "broker.other", ssl.TLSVersion.TLSv1_3, False, id="a certificate for another host is refused"
        ),
        pytest.param(
            "localhost", ssl.TLSVersion.TLSv1_1, False, id="a server offering only TLS 1.1 is refused"
        ),
    ],
)
async def test_tls_is_1_2_or_newer_with_the_host_name_checked_against_the_pinned_ca(
    tmp_path: Path, server_name: str, max_version: ssl.TLSVersion, ok: bool
) -> None:
    cert, key = _cert(tmp_path, server_name)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    server_ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    server_ctx.maximum_version = max_version

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    client_ctx = tls_context(str(cert), None, None)
    assert client_ctx.minimum_version >= ssl.TLSVersion.TLSv1_2 and client_ctx.check_hostname
    try:
        if ok:
            _, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"
            )
            writer.close()
        else:
            with pytest.raises((ssl.SSLError, ConnectionError)):
                await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="localhost")
    finally:
        server.close()


async def test_a_new_store_and_its_wal_are_readable_by_the_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    store = await Store.open(path)
    try:
        await store.db.execute("CREATE TABLE IF NOT EXISTS t(x)")
        await store.db.execute("INSERT INTO t VALUES (1)")
        for f in (path, tmp_path / "events.db-wal"):
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    finally:
        await store.close()


async def test_an_existing_store_keeps_the_mode_its_operator_chose(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    await (await Store.open(path)).close()
    path.chmod(0o640)
    await (await Store.open(path)).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
