"""`edge-agent certs`: create the agent's own OPC UA client certificate and private key.

The certificate is self-signed (RSA 2048, SHA-256, valid ``--days``), carries the application
URI as its URI subjectAltName (``urn:edge-agent:<gateway>`` by default; OPC UA servers refuse a
client whose certificate URI differs from the one it announces) and the host name as a DNS
name. The private key is created with mode 0600 from the start (never world-readable, not even
for a moment) and is never overwritten without ``--force``; the service reads it as a systemd
credential (``LoadCredential=opcua-key.pem:...``), so it stays root's. The directory, the
certificate and the ``trusted/`` directory beside them are created 0755/0644: the service's
DynamicUser reads them directly. The command prints where everything is, the thumbprint to give
the PLC's administrator (who adds the certificate to the PLC's trust list) and the config lines.

Exit codes: 0 created; 1 a file exists (use --force); 78 no gateway name to make the URI from.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import stat
from pathlib import Path
from typing import Any

import click
import yaml

from agent.cli.context import EX_CONFIG, EX_FAILURE

DEFAULT_DIR = "/etc/edge-agent/pki"
CERT_NAME, KEY_NAME, TRUSTED_NAME = "agent_cert.der", "agent_key.pem", "trusted"
KEY_CREDENTIAL = "opcua-key.pem"  # the name systemd/credentials.conf loads the key as


def _gateway_from(config_path: str) -> str | None:
    """The config's ``gateway:`` (read on its own: the full config may not load before the
    certificate it names exists)."""
    try:
        doc = yaml.safe_load(Path(config_path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    gateway = doc.get("gateway") if isinstance(doc, dict) else None
    return str(gateway) if isinstance(gateway, str | int) and not isinstance(gateway, bool) else None


def make_certificate(uri: str, host: str, days: int, now: dt.datetime) -> tuple[bytes, bytes]:
    """(DER certificate, PEM private key) of a self-signed OPC UA application instance certificate."""
    # Imported here: the cryptography package takes a good part of the start of every command.
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, f"edge-agent@{host}"[:64]),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "edge-agent"),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(uri), x509.DNSName(host)]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=True,
                key_encipherment=True,
                data_encipherment=True,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.DER), pem


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a new file created with ``mode`` (a new inode: an old, wider mode is not
    inherited; never wider than ``mode`` at any moment)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    os.fchmod(fd, mode)  # exactly ``mode``: a umask of 077 would hide the certificate from the service
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


@click.command("certs")
@click.option(
    "--dir",
    "directory",
    default=DEFAULT_DIR,
    show_default=True,
    metavar="DIR",
    help=f"Where to write {CERT_NAME}, {KEY_NAME} and the {TRUSTED_NAME}/ directory "
    "(created 0755 if missing).",
)
@click.option("--gateway", metavar="NAME", help="Gateway name for the URI (default: gateway: of the config).")
@click.option("--uri", metavar="URI", help="Application URI (default: urn:edge-agent:<gateway>).")
@click.option("--host", metavar="NAME", help="DNS name in the certificate (default: this host's name).")
@click.option("--days", default=730, show_default=True, type=click.IntRange(1, 3650), help="Validity.")
@click.option("--force", is_flag=True, help="Replace an existing certificate and key.")
@click.pass_context
def certs(
    ctx: click.Context,
    directory: str,
    gateway: str | None,
    uri: str | None,
    host: str | None,
    days: int,
    force: bool,
) -> None:
    """Create the agent's OPC UA client certificate and private key (key mode 0600).

    \b
    Prints the thumbprint to give the PLC's administrator (the PLC must trust the
    certificate), and the security: lines for the config. The PLC's own certificate
    goes into the trust list (security.trusted or security.server_certificate).
    """
    obj: Any = ctx.obj
    config_path = getattr(obj, "config", None) or "/etc/edge-agent/config.yaml"
    if uri is None:
        gateway = gateway or _gateway_from(config_path)
        if not gateway:
            click.echo(
                f"edge-agent certs: no gateway name: give --gateway NAME or --uri URI, or a config "
                f"with gateway: ({config_path} has none)",
                err=True,
            )
            ctx.exit(EX_CONFIG)
        uri = f"urn:edge-agent:{gateway}"
    folder = Path(directory)
    cert_path, key_path = folder / CERT_NAME, folder / KEY_NAME
    existing = [p for p in (cert_path, key_path) if p.exists()]
    if existing and not force:
        click.echo(f"edge-agent certs: {existing[0]} exists; --force replaces it", err=True)
        ctx.exit(EX_FAILURE)
    trusted = folder / TRUSTED_NAME
    for d in (folder, trusted):
        _make_dir(d)
    der, pem = make_certificate(uri, host or socket.gethostname(), days, dt.datetime.now(dt.UTC))
    _write(key_path, pem, 0o600)
    _write(cert_path, der, 0o644)  # public: the PLC's administrator needs a copy
    for line in _result_lines(cert_path, key_path, uri, der):
        click.echo(line)
    for d in (folder, trusted):
        if not d.stat().st_mode & stat.S_IXOTH:
            click.echo(
                f"edge-agent certs: warning: {d} is {stat.filemode(d.stat().st_mode)}: the service's "
                f"DynamicUser cannot enter it; chmod 0755 {d}",
                err=True,
            )


def _make_dir(path: Path) -> None:
    """Create ``path`` (and its parents) 0755: the service's DynamicUser must read the certificates
    in it. An existing directory keeps its mode (a warning says when the service cannot enter)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for d in reversed(missing):
        d.mkdir(mode=0o755)
        d.chmod(0o755)  # the umask may have narrowed it


def _result_lines(cert_path: Path, key_path: Path, uri: str, der: bytes) -> list[str]:
    """Where the files are, what the certificate says, and the config lines that use it."""
    from agent.sources.opcua.trust import describe  # cryptography: see make_certificate

    info = describe(der)
    return [
        f"certificate:     {cert_path}   (DER; give a copy to the PLC's administrator)",
        f"private key:     {key_path}   (mode 0600; never leaves this gateway)",
        f"application URI: {uri}",
        f"subject:         {info.subject}",
        f"thumbprint:      {info.thumbprint}   (SHA-1, as OPC UA tools show it)",
        f"SHA-256:         {info.sha256}",
        f"valid:           {info.not_before:%Y-%m-%d} to {info.not_after:%Y-%m-%d}",
        "",
        f"trusted:         {cert_path.parent / TRUSTED_NAME}   (created; put the PLC's certificate here)",
        "",
        "config (each OPC UA connection):",
        "  security:",
        f"    certificate: {cert_path}",
        f'    private_key: "${{CREDENTIALS_DIRECTORY}}/{KEY_CREDENTIAL}"   # the key, as a credential',
        f"    trusted: {cert_path.parent / TRUSTED_NAME}",
        "unit (the service's DynamicUser cannot read the root-only key; systemd hands it a copy):",
        f"  LoadCredential={KEY_CREDENTIAL}:{key_path}   (systemd/credentials.conf has this line)",
    ]
