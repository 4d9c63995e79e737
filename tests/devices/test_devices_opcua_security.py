"""Secure endpoints: Basic256Sha256 Sign / SignAndEncrypt, a client trust store, username/password."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from asyncua import Client, ua
from asyncua.crypto.security_policies import SecurityPolicyBasic256Sha256

from devices.controller import ChannelSpec, Controller, ManualClock
from devices.opcua_nodes import NAMESPACE
from devices.opcua_server import OpcUaSecurity, OpcUaSimServer
from devices.pki import CLIENT_URI, KeyPair, TestPki, make_test_pki

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(30)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    return await make_test_pki(tmp_path_factory.mktemp("pki"))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(pki: TestPki) -> AsyncIterator[OpcUaSimServer]:
    ctrl = Controller("COMP-02", [ChannelSpec("OverTemp")], clock=ManualClock(), boot_id_start=5)
    security = OpcUaSecurity(
        policies=("Basic256Sha256_Sign", "Basic256Sha256_SignAndEncrypt"),
        certificate=pki.server.certificate,
        private_key=pki.server.private_key,
        trusted_dir=pki.trusted_dir,
        users={"agent": "s3cret"},
    )
    srv = OpcUaSimServer([ctrl], security=security)
    await srv.start()
    yield srv
    await srv.stop()


async def secure_client(server: OpcUaSimServer, pki: TestPki, pair: KeyPair, mode: Any, password: str) -> Any:
    client = Client(server.endpoint, timeout=3)
    client.application_uri = CLIENT_URI
    await client.set_security(
        SecurityPolicyBasic256Sha256,
        certificate=str(pair.certificate),
        private_key=str(pair.private_key),
        server_certificate=str(pki.server.certificate),
        mode=mode,
    )
    client.set_user("agent")
    client.set_password(password)
    return client


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param(ua.MessageSecurityMode.SignAndEncrypt, id="a trusted client reads over SignAndEncrypt"),
        pytest.param(ua.MessageSecurityMode.Sign, id="a trusted client reads over Sign"),
    ],
)
async def test_trusted_client_with_password_reads_the_boot_id(
    server: OpcUaSimServer, pki: TestPki, mode: Any
) -> None:
    client = await secure_client(server, pki, pki.trusted_client, mode, "s3cret")
    async with client:
        idx = await client.get_namespace_index(NAMESPACE)
        assert await client.get_node(f"ns={idx};s=COMP-02.BootId").read_value() == 5


@pytest.mark.parametrize(
    ("use_trusted", "password", "error"),
    [
        pytest.param(
            False, "s3cret", "BadCertificateUntrusted", id="an untrusted client certificate is rejected"
        ),
        pytest.param(True, "wrong", "BadUserAccessDenied", id="a wrong password is rejected"),
    ],
)
async def test_secure_endpoint_rejects(
    server: OpcUaSimServer, pki: TestPki, use_trusted: bool, password: str, error: str
) -> None:
    pair = pki.trusted_client if use_trusted else pki.untrusted_client
    client = await secure_client(server, pki, pair, ua.MessageSecurityMode.SignAndEncrypt, password)
    with pytest.raises(ua.UaError) as caught:
        async with client:
            pass
    assert error in type(caught.value).__name__ + str(caught.value)


async def test_no_security_endpoint_is_not_offered(server: OpcUaSimServer) -> None:
    with pytest.raises((ua.UaError, ConnectionError, OSError, TimeoutError)):
        async with Client(server.endpoint, timeout=2) as client:
            await client.get_namespace_index(NAMESPACE)


async def test_pki_puts_only_the_trusted_client_in_the_trust_store(pki: TestPki) -> None:
    trusted = {p.name for p in Path(pki.trusted_dir).iterdir()}
    assert trusted == {pki.trusted_client.certificate.name}
