"""Where the store is and how it is opened: from --db, or from the config's `store:` section.

The store commands read only this section (line-numbered, so errors say file:line: key), never
the devices or upstreams: they work on a gateway whose device maps are being edited.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from agent.config.retention import DEFAULTS, RetentionSettings, read_retention
from agent.config.units import parse_size
from agent.config.yaml_lines import ConfigProblems, Problem, _Ctx, _one_of, _read_yaml, _Section, _text
from agent.core.errors import ConfigError

DEFAULT_CONFIG = "/etc/edge-agent/config.yaml"
T = TypeVar("T")


def _synchronous(value: Any) -> str:
    return _one_of("FULL", "EXTRA", "NORMAL")(str(value).upper())


def _option(check: Callable[[Any], T], value: Any, name: str) -> T:
    try:
        return check(value)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from exc


def _store_section(config_path: str, problems: list[Problem]) -> _Section:
    """The `store:` mapping of the config file; only a missing file or broken YAML stops here."""
    cfg = Path(config_path)
    if not cfg.exists():
        raise ConfigError(
            f"no --db given and the config file {cfg} does not exist; "
            "pass --db PATH or -c FILE (a config with store.path)"
        )
    doc = _read_yaml(cfg, str(cfg), problems)
    if doc is None:
        raise ConfigProblems(problems)
    problems.clear()  # a duplicate key elsewhere in the file is for `check` to report
    top = _Section(_Ctx(str(cfg), problems), doc, "", 1)
    return top.sub("store")


def store_settings(
    *, db: str | None, config_path: str, synchronous: str | None, max_size: str | None
) -> tuple[str, str, int | None]:
    """(path, synchronous, max_bytes) of the store; --db and options win over the config."""
    sync = None if synchronous is None else _option(_synchronous, synchronous, "--synchronous")
    size = None if max_size is None else _option(parse_size, max_size, "--max-db-size")
    if db is not None:
        return db, sync or "FULL", size
    problems: list[Problem] = []
    s = _store_section(config_path, problems)
    if s.data.get("path") is None:
        s.ctx.problem(s.line, "store.path", "missing (the SQLite file of the store)")
    path = s.get("path", _text, "")
    if sync is None:
        sync = s.get("synchronous", _synchronous, "FULL")
    if size is None:
        size = s.get("max_size", parse_size, None)
    if problems:
        raise ConfigProblems(problems)
    return path, sync, size


def store_retention(config_path: str) -> RetentionSettings:
    """`store.retention` of the config (defaults when the file or the section is missing)."""
    if not Path(config_path).exists():
        return DEFAULTS
    problems: list[Problem] = []
    s = _store_section(config_path, problems)
    settings = read_retention(s.sub("retention"))
    if problems:
        raise ConfigProblems(problems)
    return settings
