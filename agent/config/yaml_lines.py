"""YAML with line numbers, and a checked view of one mapping, for the configuration loader.

Every value keeps the line it came from, so each problem can be reported as
``file:line: key: message``; a `_Section` collects problems instead of raising at the first.
It knows nothing of what the keys mean: that is for the readers in the other config modules.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from agent.config.units import parse_duration
from agent.core.contract import ContractError
from agent.core.errors import ConfigError

if TYPE_CHECKING:
    from agent.config.path_env import FileUse, PathEnv

# --- errors --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    key: str
    message: str

    def __str__(self) -> str:
        return (
            f"{self.file}:{self.line}: {self.key}: {self.message}"
            if self.key
            else (f"{self.file}:{self.line}: {self.message}")
        )


class ConfigProblems(ConfigError):
    """Every problem of a configuration at once (exit code 78)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        n = len(problems)
        head = f"{n} problem{'s' if n != 1 else ''} in the configuration"
        super().__init__(head + ":\n" + "\n".join(f"  {p}" for p in problems))

    def __reduce__(self) -> tuple[type[ConfigProblems], tuple[list[Problem]]]:
        """Pickled with its problems (a configuration read in a child process hands them over)."""
        return (ConfigProblems, (self.problems,))


# --- YAML with line numbers ------------------------------------------------------------------


class _Map(dict[Any, Any]):
    line: int = 0
    key_lines: dict[Any, int]


class _Seq(list[Any]):
    line: int = 0


class _Loader(yaml.SafeLoader):
    duplicates: list[tuple[int, Any]]


# libyaml's parser where PyYAML has it (its wheels do): a configuration of a thousand PLCs parses
# in a fifth of the time and without the pure parser's peak of memory (which the process keeps:
# bench/gateway_scale.py). A file it refuses is read again by the pure loader, so the problem is
# said in the same words and at the same line as ever.
_FastLoader: type[Any] = getattr(yaml, "CSafeLoader", _Loader)
if _FastLoader is not _Loader:

    class _CLoader(_FastLoader):  # type: ignore[misc]
        duplicates: list[tuple[int, Any]]

    _FastLoader = _CLoader


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    out = _Map()
    out.line, out.key_lines = node.start_mark.line + 1, {}
    for knode, vnode in node.value:
        key = loader.construct_object(knode, deep=True)
        if key in out:
            loader.duplicates.append((knode.start_mark.line + 1, key))
        out[key] = loader.construct_object(vnode, deep=True)
        out.key_lines[key] = knode.start_mark.line + 1
    return out


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> _Seq:
    out = _Seq(loader.construct_object(n, deep=True) for n in node.value)
    out.line = node.start_mark.line + 1
    return out


_LOADERS: list[type[Any]] = [_Loader] if _FastLoader is _Loader else [_Loader, _FastLoader]
for _cls in _LOADERS:
    _cls.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)
    _cls.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_seq)


def _read_yaml(path: Path, shown: str, problems: list[Problem]) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        problems.append(Problem(shown, 0, "", f"cannot read the file: {exc.strerror or exc}"))
        return None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        problems.append(Problem(shown, line, "", f"not UTF-8 text (byte {exc.start})"))
        return None
    fast = _parse(_FastLoader, text)
    if fast is not None:
        return _said(fast, shown, problems)
    loader: _Loader | None = None
    try:
        loader = _Loader(text)  # the reader checks for unprintable characters here already
        loader.duplicates = []
        doc = loader.get_single_data()
    except yaml.YAMLError as exc:
        line = _yaml_line(exc, text)
        hint = _quote_hint(text, line)
        problems.append(Problem(shown, line, "", f"not valid YAML: {_yaml_problem(exc)}{hint}"))
        return None
    except RecursionError:
        problems.append(Problem(shown, 0, "", "not valid YAML: nested too deeply"))
        return None
    finally:
        if loader is not None:
            loader.dispose()
    return _said((doc, loader.duplicates), shown, problems)


def _parse(cls: type[Any], text: str) -> tuple[Any, list[tuple[int, Any]]] | None:
    """(document, duplicate keys) by the fast loader, or None when it refuses the text (the pure
    loader then says why) or is the pure one itself."""
    if cls is _Loader:
        return None
    loader = cls(text)
    try:
        loader.duplicates = []
        return loader.get_single_data(), loader.duplicates
    except (yaml.YAMLError, RecursionError, UnicodeError, ValueError):
        return None
    finally:
        loader.dispose()


def _said(parsed: tuple[Any, list[tuple[int, Any]]], shown: str, problems: list[Problem]) -> Any:
    doc, duplicates = parsed
    for line, key in duplicates:
        problems.append(Problem(shown, line, str(key), "duplicate key (the later one would silently win)"))
    return doc


def _yaml_line(exc: yaml.YAMLError, text: str) -> int:
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return int(mark.line) + 1
    position = getattr(exc, "position", None)  # a ReaderError (unprintable character) has only this
    return text[: int(position)].count("\n") + 1 if isinstance(position, int) else 0


def _quote_hint(text: str, line: int) -> str:
    """A ``${VAR}`` unquoted inside ``{...}`` breaks YAML: say to quote it."""
    lines = text.splitlines()
    nearby = lines[max(0, line - 2) : line]
    if any("${" in x for x in nearby):
        return ' (quote a value with ${...} in it: "${CREDENTIALS_DIRECTORY}/name")'
    return ""


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        return f"character #x{exc.character:04x} is not allowed in YAML"
    return str(getattr(exc, "problem", None) or exc)


# --- a checked view of one mapping -----------------------------------------------------------

T = TypeVar("T")
_NAME = re.compile(r"[A-Za-z0-9._-]+")


class _Section:
    """One mapping of the YAML with its path and lines; readers record problems and return defaults."""

    def __init__(self, ctx: _Ctx, data: Any, path: str, line: int) -> None:
        self.ctx, self.path = ctx, path
        self.line = getattr(data, "line", line)
        self.ok = isinstance(data, dict)
        if not self.ok and data is not None:
            ctx.problem(self.line, path, f"must be a mapping, not {_kind(data)}")
        self.data: dict[Any, Any] = data if isinstance(data, dict) else {}
        self.used: set[str] = set()

    def key_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def key_line(self, key: str) -> int:
        lines: dict[Any, int] = getattr(self.data, "key_lines", {})
        return lines.get(key, self.line)

    def problem(self, key: str, message: str) -> None:
        self.ctx.problem(self.key_line(key), self.key_path(key), message)

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str) -> Any:
        self.used.add(key)
        return self.data.get(key)

    def get(self, key: str, check: Callable[[Any], T], default: T, *, required: bool = False) -> T:
        self.used.add(key)
        if key not in self.data or self.data[key] is None:
            if required:
                self.ctx.problem(self.line, self.key_path(key), "missing")
            return default
        try:
            return check(self.data[key])
        except (ValueError, TypeError, ContractError, ConfigError) as exc:
            self.problem(key, str(exc))
            return default

    def sub(self, key: str) -> _Section:
        self.used.add(key)
        return _Section(self.ctx, self.data.get(key), self.key_path(key), self.key_line(key))

    def finish(self, extra: tuple[str, ...] = ()) -> None:
        """Unknown keys are errors: a misspelt key must not silently fall back to a default."""
        for key in self.data:
            if key not in self.used and key not in extra:
                self.problem(str(key), "unknown key")


class _Ctx:
    def __init__(
        self,
        file: str,
        problems: list[Problem],
        check_files: bool = True,
        paths: PathEnv | None = None,
        files: list[FileUse] | None = None,
    ) -> None:
        self.file, self.problems, self.check_files = file, problems, check_files
        self.paths = paths  # None: the process's environment, no unit (agent.config.path_env)
        self.files: list[FileUse] = [] if files is None else files  # every path read, in order

    def problem(self, line: int, key: str, message: str) -> None:
        self.problems.append(Problem(self.file, line, key, message))


def _kind(v: Any) -> str:
    # isinstance, not type(v): the line-numbered loader's mappings and lists are subclasses.
    for kind, name in ((bool, "true/false"), (dict, "a mapping"), (list, "a list"), (str, "text")):
        if isinstance(v, kind):
            return name
    if v is None:
        return "empty"
    return "a number" if isinstance(v, int | float) else type(v).__name__


def _text(v: Any) -> str:
    if isinstance(v, bool):
        raise ValueError("must be text, not true/false (YAML reads On, Off, Yes and No as those: quote them)")
    if v == "":
        raise ValueError("is empty: give a value, or leave the key out where it may be left out")
    if not isinstance(v, str | int):
        raise ValueError(f"must be text, not {_kind(v)}")
    return str(v)


def _int_in(lo: int, hi: int) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"must be a whole number, not {_kind(v)}")
        if v < lo:
            raise ValueError(f"must be >= {lo}")
        if v > hi:
            raise ValueError(f"must be <= {hi}")
        return v

    return check


def _one_of(*choices: str) -> Callable[[Any], str]:
    def check(v: Any) -> str:
        if v not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, not {v!r}")
        return str(v)

    return check


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"must be true or false, not {v!r}")
    return v


def _positive_duration(v: Any) -> float:
    seconds = parse_duration(v)
    if seconds <= 0:
        raise ValueError("must be longer than 0")
    return seconds


def _device_name(v: Any) -> str:
    text = _text(v)
    if not _NAME.fullmatch(text):
        raise ValueError(f"{text!r} must match [A-Za-z0-9._-]+ (it is the part of a source before '/')")
    return text


def _values(v: Any) -> dict[int, str]:
    if not isinstance(v, dict):
        raise ValueError("must map numbers to names, e.g. {0: Normal, 1: Trip}")
    out: dict[int, str] = {}
    for k, name in v.items():
        if isinstance(k, bool) or not isinstance(k, int):
            raise ValueError(f"key {k!r} must be a number (the raw value)")
        out[k] = _text(name)
    return out


def _empty() -> list[Any]:
    return []


def _list(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise ValueError(f"must be a list, not {_kind(v)}")
    return v
