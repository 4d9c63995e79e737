"""File-path settings: `${VAR}` references expanded, systemd credentials resolved, every use kept.

A file-path setting (certificates, keys, password and token files, CA files, the trusted
directory) may name environment variables as ``${NAME}``; the most useful one is
``${CREDENTIALS_DIRECTORY}``, which systemd sets for a unit with ``LoadCredential=``. Inside
the unit it is expanded like any variable. Outside it (``edge-agent check`` before
``systemctl enable``), ``${CREDENTIALS_DIRECTORY}/NAME`` and ``/run/credentials/<unit>/NAME``
resolve to the file the unit's ``LoadCredential=NAME:FILE`` loads, when the unit is known (see
`agent.config.unit`). An unknown variable is a configuration problem with file and line.

Every path read is recorded as a :class:`FileUse` (file, line, key, what it is, whether it is a
secret, which credential it came from), so the checks of who can read what
(`agent.config.access`) name the setting that asked for the file.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agent.config.yaml_lines import _Section, _text

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


def read_path(s: _Section, key: str, kind: Kind, *, secret: bool = False) -> str | None:
    """The path setting ``key`` of ``s``: expanded, checked to exist (unless the loader was told
    not to), and recorded in ``s.ctx.files``. A problem is recorded with file and line."""
    raw = s.get(key, _text, None)
    if raw is None:
        return None
    paths = s.ctx.paths or PathEnv()
    try:
        path, credential = paths.expand(raw)
    except ValueError as exc:
        if not s.ctx.check_files:  # a config written for another machine: its paths stay as written
            return raw
        s.problem(key, str(exc))
        return None
    if s.ctx.check_files and not _found(path, kind):
        via = f" (credential {credential} of {paths.unit or 'the unit'})" if credential else ""
        s.problem(key, f"{kind if kind == 'file' else 'directory'} {path}{via} does not exist")
        return None
    s.ctx.files.append(FileUse(s.ctx.file, s.key_line(key), s.key_path(key), path, kind, secret, credential))
    return path


def _found(path: str, kind: Kind) -> bool:
    """Whether ``path`` is a file (or directory). One this user may not even look at counts as
    found: the access checks (`agent.config.access`) then say who cannot read it, and why."""
    try:
        mode = os.stat(path).st_mode
    except PermissionError:
        return True
    except OSError:
        return False
    return stat.S_ISDIR(mode) if kind == "dir" else stat.S_ISREG(mode)
