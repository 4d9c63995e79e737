"""Is this OPC UA server certificate trusted? (No trust on first use.)

Holds the loading of the trust list and the check of one certificate against it. It must not
open connections: the session pins only what this approves.

asyncua's client does not check the server's certificate: without ``server_certificate`` it
takes whatever the server's endpoint list offers. The agent instead takes the certificate from
the endpoint list, checks it against the configured trust list (``server_certificate``, one
pinned certificate, and/or every certificate in the ``trusted`` directory; exact matches, DER
or PEM), and only then opens a secure channel pinned to it. A certificate that is not in the
list, or is outside its validity period, is refused with its subject and thumbprints, so the
operator can compare them with what the PLC's administrator reads off the PLC.

The thumbprint is the SHA-1 of the DER certificate (what OPC UA tools display); SHA-256 is
shown too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

CERT_SUFFIXES = (".der", ".pem", ".crt", ".cer")


@dataclass(frozen=True)
class CertInfo:
    subject: str
    thumbprint: str  # SHA-1, colon-separated hex (as OPC UA tools show it)
    sha256: str
    not_before: datetime
    not_after: datetime
    uri: str | None


def _hex(digest: bytes) -> str:
    return ":".join(f"{b:02X}" for b in digest)


def first_certificate(chain: bytes) -> bytes:
    """The first DER certificate of a concatenated chain (OPC UA sends chains as one blob)."""
    if len(chain) < 2 or chain[0] != 0x30:
        return chain
    n = chain[1]
    if n < 0x80:
        return chain[: 2 + n]
    k = n & 0x7F
    length = int.from_bytes(chain[2 : 2 + k], "big")
    return chain[: 2 + k + length]


def describe(der: bytes) -> CertInfo:
    """Subject, thumbprints, validity and application URI of a DER certificate (ValueError if none)."""
    cert = x509.load_der_x509_certificate(der)
    uri: str | None = None
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        uris = san.get_values_for_type(x509.UniformResourceIdentifier)
        uri = uris[0] if uris else None
    except x509.ExtensionNotFound:
        pass
    return CertInfo(
        subject=cert.subject.rfc4514_string(),
        thumbprint=_hex(hashlib.sha1(der, usedforsecurity=False).digest()),  # OPC UA thumbprints are SHA-1
        sha256=_hex(hashlib.sha256(der).digest()),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        uri=uri,
    )


def read_certificate(path: Path) -> bytes:
    """One certificate file (DER or PEM) as DER."""
    data = path.read_bytes()
    if b"-----BEGIN CERTIFICATE-----" in data:
        return x509.load_pem_x509_certificate(data).public_bytes(Encoding.DER)
    return first_certificate(data)


def load_trust_list(server_certificate: str | None, trusted: str | None) -> list[bytes]:
    """The DER certificates of the trust list (files that are not certificates are skipped)."""
    files: list[Path] = [Path(server_certificate)] if server_certificate else []
    if trusted:
        files += sorted(p for p in Path(trusted).iterdir() if p.suffix.lower() in CERT_SUFFIXES)
    out = []
    for f in files:
        try:
            out.append(read_certificate(f))
        except (OSError, ValueError):
            continue
    return out


def untrusted_reason(der: bytes, trust: Iterable[bytes], now: datetime, where: str) -> str | None:
    """Why the server certificate ``der`` is refused (None: trusted). ``where`` names the trust list."""
    try:
        info = describe(der)
    except ValueError:
        return "the server sent no readable certificate"
    shown = f'subject "{info.subject}", thumbprint (SHA-1) {info.thumbprint}, SHA-256 {info.sha256}'
    if der not in set(trust):
        return (
            f"server certificate is not trusted: {shown}. Compare the thumbprint with the PLC's "
            f"administrator, then add the certificate to {where} (no trust on first use)"
        )
    if not info.not_before <= now <= info.not_after:
        return (
            f"server certificate is outside its validity ({info.not_before:%Y-%m-%d} to "
            f"{info.not_after:%Y-%m-%d}): {shown}"
        )
    return None
