"""`ledger.yaml` -> typed settings, every problem at once with file:line (exit 78).

Shape (ledger.md section 6; names may grow, never change): `dsn`, `password_file`, `mqtt`,
`http` (at least one of the two), `notify` (rules), `require_sync_standby` (section 7: refuse to
acknowledge while the primary has no synchronous standby; default false), `retention`
(`agent.ledger.retention_config`). Reuses the
gateway's line-numbered YAML reader, so messages look the same.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.config.units import parse_size
from agent.config.yaml_lines import (
    ConfigProblems,
    Problem,
    _bool,
    _Ctx,
    _int_in,
    _list,
    _Map,
    _read_yaml,
    _Section,
    _text,
)
from agent.ledger.config_views import DEFAULT_STATUS_TOPIC, MetricsSettings, WebSettings, views
from agent.ledger.retention_config import RetentionSettings, retention_section

DEFAULT_MAX_BODY = 16 * 1024 * 1024
_LISTEN = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\s]+):(?P<port>\d{1,5})")


@dataclass(frozen=True, slots=True)
class MqttIntake:
    host: str
    port: int
    topic: str
    group: str | None  # None: a plain subscription (the default; a broker restart keeps it)
    client_id: str
    username: str | None = None
    password_file: str | None = None
    session_expiry_s: int = 7 * 86400
    batch: int = 1000
    receipts: bool = True  # after each COMMIT, a receipt to every gateway store in the batch

    @property
    def subscription(self) -> str:
        """The topic filter: plain, or `$share/<group>/<topic>` when a group is set. Mosquitto
        2.0 does not restore a shared subscription after a restart (even a clean one), so what
        gateways publish before the instance subscribes again is lost unless they use receipts."""
        return self.topic if self.group is None else f"$share/{self.group}/{self.topic}"


@dataclass(frozen=True, slots=True)
class HttpIntake:
    host: str
    port: int
    token_file: str | None = None
    max_body: int = DEFAULT_MAX_BODY


@dataclass(frozen=True, slots=True)
class NotifyRule:
    kind: str
    url: str
    type: str | None = None
    source: str | None = None  # shell-style glob over the whole CloudEvents source; `*` crosses `/`
    payload: dict[str, Any] = field(default_factory=dict)
    max_attempts: int = 20
    lease_s: int = 30

    def matches(self, ce_type: str, source: str, payload: dict[str, Any]) -> bool:
        if self.type is not None and ce_type != self.type:
            return False
        if self.source is not None and not fnmatch.fnmatchcase(source, self.source):
            return False
        return all(payload.get(k) == v for k, v in self.payload.items())


@dataclass(frozen=True, slots=True)
class LedgerConfig:
    dsn: str | None
    password_file: str | None
    mqtt: MqttIntake | None
    http: HttpIntake | None
    notify: tuple[NotifyRule, ...]
    file: str
    metrics: MetricsSettings | None = None
    web: WebSettings | None = None
    status_topic: str = DEFAULT_STATUS_TOPIC
    require_sync_standby: bool = False
    retention: RetentionSettings | None = None  # None: nothing pruned, nothing beyond the horizon


def load(path: str | Path, *, check_files: bool = True) -> LedgerConfig:
    """Read and check `ledger.yaml`; raises ConfigProblems with every problem found."""
    main = Path(path)
    problems: list[Problem] = []
    doc = _read_yaml(main, str(main), problems)
    if problems:
        raise ConfigProblems(problems)
    ctx = _Ctx(str(main), problems, check_files)
    top = _Section(ctx, doc if doc is not None else _Map(), "", 1)
    dsn = top.get("dsn", _text, "") or None
    password_file = top.get("password_file", _file(check_files), "") or None
    require_sync = top.get("require_sync_standby", _bool, False)
    mqtt = _mqtt(top.sub("mqtt"), check_files) if top.has("mqtt") else None
    http = _http(top.sub("http"), check_files) if top.has("http") else None
    rules = [
        _rule(_Section(ctx, entry, f"notify[{i}]", top.key_line("notify")))
        for i, entry in enumerate(top.get("notify", _list, _no_rules()))
    ]
    metrics, web, status_topic = views(top, check_files)
    retention = retention_section(top.sub("retention"), check_files) if top.has("retention") else None
    top.finish()
    if mqtt is None and http is None and not problems:
        problems.append(
            Problem(str(main), top.line or 1, "", "neither `mqtt` nor `http` intake is configured")
        )
    kinds = [r.kind for r in rules]
    for i, k in enumerate(kinds):
        if k and k in kinds[:i]:
            problems.append(
                Problem(str(main), top.key_line("notify"), f"notify[{i}].kind", f"{k!r} is used twice")
            )
    if problems:
        raise ConfigProblems(problems)
    return LedgerConfig(
        dsn,
        password_file,
        mqtt,
        http,
        tuple(rules),
        str(main),
        metrics,
        web,
        status_topic,
        require_sync,
        retention,
    )


def _no_rules() -> list[Any]:
    return []


def _file(check: bool) -> Any:
    def read(v: Any) -> str:
        text = _text(v)
        if check and not os.access(text, os.R_OK):
            raise ValueError(f"{text} cannot be read")
        return text

    return read


def _mqtt(s: _Section, check_files: bool) -> MqttIntake:
    out = MqttIntake(
        host=s.get("host", _text, "127.0.0.1"),
        port=s.get("port", _int_in(1, 65535), 1883),
        topic=s.get("topic", _text, "+/events/#"),
        group=s.get("group", _text, "") or None,
        client_id=s.get("client_id", _text, "", required=True),
        username=s.get("username", _text, "") or None,
        password_file=s.get("password_file", _file(check_files), "") or None,
        session_expiry_s=s.get("session_expiry_s", _int_in(3600, 2**32 - 1), 7 * 86400),
        batch=s.get("batch", _int_in(1, 65535), 1000),
        receipts=s.get("receipts", _bool, True),
    )
    s.finish()
    return out


def _listen(v: Any) -> tuple[str, int]:
    m = _LISTEN.fullmatch(_text(v))
    if m is None or not 0 < int(m["port"]) < 65536:
        raise ValueError(f"{v!r} must be host:port with a port 1..65535, e.g. 127.0.0.1:8088")
    return m["host"].strip("[]"), int(m["port"])


def _size(v: Any) -> int:
    return parse_size(v)


def _http(s: _Section, check_files: bool) -> HttpIntake:
    host, port = s.get("listen", _listen, ("127.0.0.1", 8088), required=True)
    out = HttpIntake(
        host=host,
        port=port,
        token_file=s.get("token_file", _file(check_files), "") or None,
        max_body=s.get("max_body", _size, DEFAULT_MAX_BODY),
    )
    s.finish()
    return out


def _url(v: Any) -> str:
    text = _text(v)
    if not re.match(r"https?://[^/\s]+", text):
        raise ValueError(f"{text!r} must be an http:// or https:// URL")
    return text


def _mapping(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise ValueError("must be a mapping of payload field to value")
    return {str(k): val for k, val in v.items()}


def _rule(s: _Section) -> NotifyRule:
    kind = s.get("kind", _text, "", required=True)
    url = s.get("url", _url, "", required=True)
    max_attempts = s.get("max_attempts", _int_in(1, 1000), 20)
    lease_s = s.get("lease_s", _int_in(1, 86400), 30)
    when = s.sub("when")
    ce_type = when.get("type", _text, "") or None
    source = when.get("source", _text, "") or None
    empty: dict[str, Any] = {}
    payload = when.get("payload", _mapping, empty)
    when.finish()
    s.finish()
    return NotifyRule(kind, url, ce_type, source, payload, max_attempts, lease_s)
