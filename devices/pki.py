"""Throw-away certificates for the OPC UA simulator's secure endpoints (tests and demos only).

One call makes a server certificate, a client certificate the server trusts (its DER copy is
in ``trusted/``) and one it does not. Each certificate carries its application URI as a URI
SAN: asyncua rejects a client whose certificate URI differs from ``client.application_uri``
(``BadCertificateUriInvalid``), so clients must set ``application_uri = CLIENT_URI``.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from asyncua.crypto.cert_gen import setup_self_signed_certificate
from cryptography.x509.oid import ExtendedKeyUsageOID

SERVER_URI = "urn:edge-agent:sim:server"
CLIENT_URI = "urn:edge-agent:agent"


@dataclass(frozen=True)
class KeyPair:
    certificate: Path  # DER
    private_key: Path  # PEM


@dataclass(frozen=True)
class TestPki:
    """Paths of a generated PKI; ``trusted_dir`` is what the server's trust store loads."""

    __test__ = False  # not a pytest test class, despite the name

    server: KeyPair
    trusted_client: KeyPair
    untrusted_client: KeyPair
    trusted_dir: Path


async def make_test_pki(directory: Path, *, host: str | None = None) -> TestPki:
    """Create (or reuse, when still valid) the three key pairs under ``directory``."""
    host = host or socket.gethostname()
    trusted = directory / "trusted"
    trusted.mkdir(parents=True, exist_ok=True)
    (directory / "untrusted").mkdir(exist_ok=True)
    server = KeyPair(directory / "server_cert.der", directory / "server_key.pem")
    good = KeyPair(trusted / "agent_cert.der", directory / "agent_key.pem")
    bad = KeyPair(directory / "untrusted" / "stranger_cert.der", directory / "stranger_key.pem")
    await setup_self_signed_certificate(
        server.private_key, server.certificate, SERVER_URI, host, [ExtendedKeyUsageOID.SERVER_AUTH], {}
    )
    for pair in (good, bad):
        await setup_self_signed_certificate(
            pair.private_key, pair.certificate, CLIENT_URI, host, [ExtendedKeyUsageOID.CLIENT_AUTH], {}
        )
    return TestPki(server, good, bad, trusted)
