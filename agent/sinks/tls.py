"""What every sink needs to reach an upstream securely: secret files and TLS client contexts.

Shared by the MQTT and HTTP sinks so that neither imports the other. Holds no connection and
never logs a secret's content.
"""

from __future__ import annotations

import ssl
from pathlib import Path


def read_secret(path: str) -> str:
    """A secret file's content without its trailing newline (systemd credentials, Docker secrets)."""
    return Path(path).read_text(encoding="utf-8").rstrip("\r\n")


def tls_context(ca_file: str | None, cert_file: str | None, key_file: str | None) -> ssl.SSLContext:
    """Verify the server (pinned CA if given, else the system store); optional client certificate.

    TLS 1.2 or newer, certificate and host name checked (``create_default_context`` does both; the
    floor is set here so that an OpenSSL configured to allow TLS 1.0 does not lower it). With
    ``ca_file`` only that CA is trusted, not the system store."""
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname, ctx.verify_mode = True, ssl.CERT_REQUIRED
    if cert_file is not None:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx
