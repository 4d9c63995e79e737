"""Every exit code `--help` documents is produced by a real invocation, and none is undocumented:
the table below has one case per code, and the test that the table and the help text agree."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from agent.cli import context
from agent.cli.main import cli

Case = Callable[[Path], int]


def _config(tmp_path: Path, **extra: object) -> Path:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    doc = {
        "site": "plant-1",
        "gateway": "gw",
        "store": {"path": str(tmp_path / "events.db")},
        "devices": [
            {
                "name": "PUMP-07",
                "connections": [{"modbus": {"host": "127.0.0.1", "port": port, "timeout": "500ms"}}],
                "channels": {
                    "Trip": {"transition_id": {"register": 10, "type": "uint32"}, "state": {"register": 12}}
                },
            }
        ],
        **extra,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _invoke(*args: str) -> int:
    return CliRunner().invoke(cli, list(args)).exit_code


def ok(tmp_path: Path) -> int:
    return _invoke("check", "-c", str(_config(tmp_path)))


def certs_exist(tmp_path: Path) -> int:
    assert _invoke("certs", "--dir", str(tmp_path), "--gateway", "gw") == 0
    return _invoke("certs", "--dir", str(tmp_path), "--gateway", "gw")


def usage(tmp_path: Path) -> int:
    return _invoke("report", "--no-such-option")


def no_store(tmp_path: Path) -> int:
    code = _invoke("--db", str(tmp_path / "typo.db"), "report")
    assert not (tmp_path / "typo.db").exists()
    return code


def device_unreadable(tmp_path: Path) -> int:
    return _invoke("check", "-c", str(_config(tmp_path)), "--probe", "--timeout", "2")


def store_damaged(tmp_path: Path) -> int:
    (tmp_path / "garbage.db").write_bytes(b"not a database at all" * 200)
    return _invoke("--db", str(tmp_path / "garbage.db"), "report")


def file_unreadable_for_the_service(tmp_path: Path) -> int:
    secret = tmp_path / "token"
    secret.write_text("t\n", encoding="utf-8")
    secret.chmod(0o600)  # the unit's DynamicUser is "others": it can read neither this nor tmp_path
    http = {"url": "https://historian.example/ingest", "token_file": str(secret)}
    cfg = _config(tmp_path, upstreams=[{"name": "historian", "http": http}])
    unit = tmp_path / "edge-agent.service"
    unit.write_text("[Service]\nDynamicUser=yes\n", encoding="utf-8")
    return _invoke("check", "-c", str(cfg), "--unit", str(unit))


def config_error(tmp_path: Path) -> int:
    path = tmp_path / "config.yaml"
    path.write_text("site: plant-1\ngateway: gw\nstore: {path: x.db}\ndevices: []\nunknown_key: 1\n")
    return _invoke("check", "-c", str(path))


def reader_gone(tmp_path: Path) -> int:
    """stdout is a pipe whose reader has already closed: the first write fails (EPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "agent", "check", "-c", str(_config(tmp_path))],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert proc.stderr == b""
    return proc.returncode


CASES: dict[int, Case] = {
    0: ok,
    1: certs_exist,
    2: usage,
    66: no_store,
    69: device_unreadable,
    74: store_damaged,
    77: file_unreadable_for_the_service,
    78: config_error,
    141: reader_gone,
}


def documented() -> set[int]:
    text = context.EXIT_CODES_HELP
    return {int(m.group(1)) for m in re.finditer(r"(?:Exit codes: |, )(\d+) ", text)}


def test_the_help_documents_exactly_the_codes_that_are_tested() -> None:
    assert documented() == set(CASES)
    shown = " ".join(CliRunner().invoke(cli, ["--help"]).output.split())
    assert " ".join(context.EXIT_CODES_HELP.split()) in shown


def test_the_docs_document_every_code() -> None:
    readme = (Path(__file__).parents[2] / "docs" / "commands.md").read_text(encoding="utf-8")
    start = readme.index("Exit codes (also in `edge-agent --help`):")
    section = readme[start : readme.index("\n\n", start)]
    for code in CASES:
        assert re.search(rf"\b{code}\b", section), code


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("code", "case"), CASES.items(), ids=[f"{c} {f.__name__}" for c, f in CASES.items()])
def test_each_exit_code(tmp_path: Path, code: int, case: Case) -> None:
    assert case(tmp_path) == code
