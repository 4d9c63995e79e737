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
(`agent.config.access`) name the setting that asked for the file. `FileUse` and `PathEnv` (the
expansion) live in `agent.config.path_env`, which both this module and `agent.config.yaml_lines`
import (no circle between the two).
"""

from __future__ import annotations

import os
import stat

from agent.config.path_env import FileUse, Kind, PathEnv
from agent.config.yaml_lines import _Section, _text


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
