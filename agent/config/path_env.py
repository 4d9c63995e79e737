"""What `${VAR}` references in file paths expand to (`PathEnv`: the environment, the unit's
systemd credentials) and every file the configuration names (`FileUse`). Plain data and
expansion: `agent.config.paths` reads a path setting with them, `agent.config.yaml_lines`
keeps the uses in its context, and neither is imported here."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

CREDENTIALS = "CREDENTIALS_DIRECTORY"
Kind = Literal["file", "dir"]

_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RUN_CREDENTIALS = re.compile(r"/run/credentials/[^/]+/([^/]+)")


@dataclass(frozen=True)
class FileUse:
    """One file or directory the configuration names: where, as what, and how it gets there."""

    file: str  # the config file that names it
    line: int
    key: str  # e.g. devices[2].connections[0].opcua.security.private_key
    path: str  # expanded (and, outside the unit, resolved to the credential's source)
    kind: Kind
    secret: bool  # a password, token or private key: warn when others can read it
    credential: str | None = None  # systemd credential name: systemd (root) reads the file, not the unit

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}: {self.key}"


@dataclass(frozen=True)
class PathEnv:
    """What references in paths expand to: the environment, and the unit's credentials (name to
    source file, from `LoadCredential=`) for use outside the unit."""

    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    credentials: Mapping[str, str] = field(default_factory=dict)
    unit: str | None = None  # the unit file the credentials were read from (for messages)

    def expand(self, text: str) -> tuple[str, str | None]:
        """(path, credential name or None); ValueError says which reference cannot be expanded."""
        inside_unit = CREDENTIALS in self.env
        for m in _REFERENCE.finditer(text):
            name = m.group(1)
            if not _VARIABLE.fullmatch(name):
                raise ValueError(f"${{{name}}} is not a variable name (letters, digits, _)")
            if name == CREDENTIALS and not inside_unit:
                return self._credential(text, text[m.end() :].lstrip("/"))
            if name not in self.env:
                raise ValueError(f"${{{name}}} is not set in the environment")
        expanded = _REFERENCE.sub(lambda m: self.env[m.group(1)], text)
        literal = _RUN_CREDENTIALS.fullmatch(expanded)
        if literal and not inside_unit and not Path(expanded).exists():
            return self._credential(text, literal.group(1))
        credential = None
        if inside_unit and text.startswith(f"${{{CREDENTIALS}}}/"):
            credential = text.split("/", 1)[1]
        return expanded, credential

    def _credential(self, text: str, name: str) -> tuple[str, str]:
        if name in self.credentials:
            return self.credentials[name], name
        if self.unit is None:
            raise ValueError(
                f"{text}: systemd credentials (${{{CREDENTIALS}}}) exist only inside the running unit; "
                f"outside it, give --unit FILE (the installed edge-agent.service, whose "
                f"LoadCredential={name}:FILE names the file)"
            )
        raise ValueError(f"{text}: {self.unit} has no LoadCredential={name}:FILE")
