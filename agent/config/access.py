"""Who can read what the configuration names: as the unit's user (for `check`) and as this
process (for `run`, before anything starts).

`check` runs as root or as an operator, the service as systemd's ``DynamicUser=`` (a uid
allocated at start that owns no file and is in no group, so only the "other" permission bits
apply to it) or as ``User=``. :func:`check_access` therefore evaluates the permission bits of
each file and of every directory above it for that user, without switching users; POSIX ACLs
are not evaluated. Files that come as systemd credentials (``LoadCredential=``) are read by
systemd as root, so for them only their existence and their own mode count.
:func:`unreadable_now` tries the real thing as the current process (open, list, access).
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent.config.loader import Config
from agent.config.path_env import FileUse
from agent.config.unit import Unit

READ, WRITE, SEARCH = 4, 2, 1


@dataclass(frozen=True)
class Who:
    """The user the service runs as. ``uid`` None: a DynamicUser (only "other" bits count)."""

    label: str
    uid: int | None
    gids: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Finding:
    level: Literal["error", "warning"]
    text: str


def named_user(name: str) -> Who:
    """The user ``name`` (or a numeric uid) with its groups; KeyError when there is none."""
    entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    gids = frozenset(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return Who(f"user {entry.pw_name} (uid {entry.pw_uid})", entry.pw_uid, gids)


def unit_user(unit: Unit) -> Who:
    """The user the unit runs as: its DynamicUser, its User=, or root."""
    if unit.dynamic_user:
        return Who(f"the unit's dynamic user (DynamicUser=yes in {unit.name})", None)
    if unit.user:
        return named_user(unit.user)
    return Who(f"root (no User= in {unit.name})", 0, frozenset({0}))


def check_access(cfg: Config, store_path: str, who: Who | None, unit: Unit | None) -> list[Finding]:
    """Errors for every file ``who`` cannot read (or store directory it cannot write), and
    warnings for secrets that every user can read (those alone when ``who`` is None)."""
    out: list[Finding] = []
    for use in cfg.files:
        if use.secret:
            out += _secret_mode(use)
        if use.credential is not None or who is None:
            continue  # systemd reads it as root and hands the unit a copy
        reason = _denied(Path(use.path), READ | (SEARCH if use.kind == "dir" else 0), who)
        if reason is None and use.kind == "dir":
            reason = next(
                (r for p in sorted(Path(use.path).iterdir()) if p.is_file() and (r := _denied(p, READ, who))),
                None,
            )
        if reason is not None:
            out.append(Finding("error", f"{use.where}: {use.path}: {who.label} cannot read it: {reason}"))
    return out + (_store_access(store_path, who, unit) if who is not None else [])


def _secret_mode(use: FileUse) -> list[Finding]:
    try:
        mode = Path(use.path).stat().st_mode
    except OSError:
        return []
    if mode & stat.S_IROTH:
        return [
            Finding(
                "warning",
                f"{use.where}: {use.path} is a secret readable by every user "
                f"({stat.filemode(mode)}); chmod o-r it",
            )
        ]
    return []


def _store_access(store_path: str, who: Who, unit: Unit | None) -> list[Finding]:
    path = Path(store_path).absolute()
    if unit is not None:
        for name in unit.state_directories:
            state = Path("/var/lib") / name
            if path.is_relative_to(state):
                return []  # systemd makes the StateDirectory the unit user's at every start
        if unit.protect_system == "strict":
            return [
                Finding(
                    "error",
                    f"store.path {store_path} is outside the unit's StateDirectory "
                    f"(/var/lib/{' /var/lib/'.join(unit.state_directories) or '...'}): "
                    f"ProtectSystem=strict in {unit.name} makes it read-only for the service",
                )
            ]
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the service creates the missing directories below this one
    reason = _denied(folder, WRITE | SEARCH, who)
    if reason is None and path.exists():
        reason = _denied(path, READ | WRITE, who)
    if reason is None:
        return []
    return [Finding("error", f"store.path {store_path}: {who.label} cannot write it: {reason}")]


def _denied(path: Path, want: int, who: Who) -> str | None:
    """Why ``who`` cannot use ``path`` as ``want`` (directories above need search), or None."""
    absolute = path.absolute()
    for folder in reversed(absolute.parents):
        if (reason := _lacks(folder, SEARCH, who)) is not None:
            return reason
    return _lacks(absolute, want, who)


def _lacks(path: Path, want: int, who: Who) -> str | None:
    try:
        st = path.stat()
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if who.uid == 0:
        return None
    if who.uid is not None and st.st_uid == who.uid:
        bits, cls = (st.st_mode >> 6) & 7, "its owner"
    elif who.uid is not None and st.st_gid in who.gids:
        bits, cls = (st.st_mode >> 3) & 7, "its group"
    else:
        bits, cls = st.st_mode & 7, "others"
    if bits & want == want:
        return None
    needed = "".join(c for bit, c in ((READ, "r"), (WRITE, "w"), (SEARCH, "x")) if want & bit)
    return f"{path} is {stat.filemode(st.st_mode)} {_owner(st)}: {cls} lack {needed}"


def _owner(st: os.stat_result) -> str:
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{user}:{group}"


def unreadable_now(cfg: Config, store_path: str) -> list[str]:
    """What this process cannot read (or, for the store's directory, write), one line each."""
    out: list[str] = []
    for use in cfg.files:
        try:
            if use.kind == "dir":
                for entry in os.scandir(use.path):
                    if entry.is_file():
                        with open(entry.path, "rb"):
                            pass
            else:
                with open(use.path, "rb"):
                    pass
        except OSError as exc:
            out.append(f"{use.where}: cannot read {exc.filename or use.path}: {exc.strerror or exc}")
    path = Path(store_path).absolute()
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not os.access(folder, os.W_OK | os.X_OK):
        out.append(f"store.path {store_path}: cannot write in {folder}")
    elif path.exists() and not os.access(path, os.R_OK | os.W_OK):
        out.append(f"store.path {store_path}: cannot read and write it")
    return out
