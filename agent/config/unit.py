"""What `edge-agent check` needs to know of the installed systemd unit, read from its files.

Only the settings that decide what the service can read and where its secrets come from:
``LoadCredential=`` (credential name to source file), ``DynamicUser=``/``User=``/``Group=``,
``StateDirectory=`` and ``ProtectSystem=``. The unit file and its drop-ins
(``<unit>.d/*.conf``, in name order, later lines win as in systemd) are parsed as text; systemd
itself is never asked (`check` must work before the unit is enabled, and in containers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

UNIT_NAME = "edge-agent.service"
UNIT_DIRS = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
)
# Where systemd looks for a credential named without an absolute path (systemd.exec(5)).
CREDSTORES = ("/etc/credstore", "/run/credstore", "/usr/local/lib/credstore", "/usr/lib/credstore")


@dataclass(frozen=True)
class Unit:
    """The settings of the unit that matter for file access; `files` are the ones read."""

    files: tuple[str, ...]
    credentials: dict[str, str] = field(default_factory=dict)  # name -> source file
    dynamic_user: bool = False
    user: str | None = None
    group: str | None = None
    state_directories: tuple[str, ...] = ()  # under /var/lib
    protect_system: str = "no"

    @property
    def name(self) -> str:
        return self.files[0]


def find_unit() -> str | None:
    """The installed edge-agent.service, first in systemd's search order, if any."""
    for folder in UNIT_DIRS:
        candidate = Path(folder) / UNIT_NAME
        if candidate.is_file():
            return str(candidate)
    return None


def read_unit(path: str) -> Unit:
    """Parse the unit at ``path`` and its drop-ins; OSError when the unit cannot be read."""
    main = Path(path)
    files = [main, *sorted(Path(f"{path}.d").glob("*.conf"))]
    for folder in UNIT_DIRS:  # drop-ins for the unit's name in systemd's own directories too
        files += sorted((Path(folder) / f"{main.name}.d").glob("*.conf"))
    seen: list[Path] = []
    for f in files:
        if f not in seen:
            seen.append(f)
    settings: dict[str, list[str]] = {}
    for f in seen:
        text = f.read_text(encoding="utf-8") if f == main else _read_or_empty(f)
        _service_settings(text, settings)
    credentials: dict[str, str] = {}
    for value in settings.get("LoadCredential", []):
        if not value:  # an empty assignment resets the list
            credentials.clear()
            continue
        name, _, source = value.partition(":")
        credentials[name] = _credential_source(name, source)
    state = tuple(w for v in settings.get("StateDirectory", []) for w in v.split())
    return Unit(
        files=tuple(str(f) for f in seen if f.exists()),
        credentials=credentials,
        dynamic_user=_yes(_last(settings, "DynamicUser", "no")),
        user=_last(settings, "User", "") or None,
        group=_last(settings, "Group", "") or None,
        state_directories=state,
        protect_system=_last(settings, "ProtectSystem", "no"),
    )


def _read_or_empty(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def _service_settings(text: str, into: dict[str, list[str]]) -> None:
    """``Key=value`` lines of the [Service] section (continuation lines joined)."""
    section = ""
    for raw in text.replace("\\\n", " ").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif section == "Service" and "=" in line:
            key, _, value = line.partition("=")
            into.setdefault(key.strip(), []).append(value.strip())


def _credential_source(name: str, source: str) -> str:
    """An absolute source is the file; a relative one or none is looked up in the credstores."""
    if source.startswith("/"):
        return source
    wanted = source or name
    for store in CREDSTORES:
        candidate = Path(store) / wanted
        if candidate.exists():
            return str(candidate)
    return str(Path(CREDSTORES[0]) / wanted)


def _last(settings: dict[str, list[str]], key: str, default: str) -> str:
    values = settings.get(key)
    return values[-1] if values else default


def _yes(value: str) -> bool:
    return value.lower() in ("1", "yes", "true", "on")
