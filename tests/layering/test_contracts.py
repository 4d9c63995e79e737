"""The layering contracts in pyproject.toml fail on the breaks they exist to catch.

Each case copies the package to a temporary tree, adds one forbidden import to one module and runs
`lint-imports` there: the named contract must come back BROKEN, and the untouched copy must pass.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")

ACYCLIC = "no import circle inside a room"

BREAKS = [
    (
        "agent/store/outbox.py",
        "import agent.sinks.encode",
        "sources, store and sinks never import each other",
    ),
    ("agent/sources/importer.py", "import agent.store", "sources, store and sinks never import each other"),
    ("agent/sinks/mqtt.py", "import agent.sinks.http", "the two senders never import each other"),
    ("agent/config/loader.py", "import agent.sources.pollers", "config imports only core"),
    (
        "agent/core/contract.py",
        "import agent.config",
        "core is the ground floor: it imports nothing else of agent",
    ),
    (
        "agent/core/jcs.py",
        "import yaml",
        "core is pure: no database, protocol, network, terminal or YAML library",
    ),
    ("agent/service/recorder.py", "import aiosqlite", "only the store speaks SQLite"),
    (
        "agent/store/report.py",
        "import agent.cli.render",
        "sources, store and sinks never reach up into the service or the CLI",
    ),
    (
        "devices/plant.py",
        "import agent.core.contract",
        "devices/ is an independent peer: it never imports agent",
    ),
    (
        "agent/ledger/arbiter.py",
        "import agent.store.batch",
        "the ledger never reaches into the gateway's store, sources or service",
    ),
    ("agent/service/recorder.py", "import psycopg", "only the ledger and the CLI speak PostgreSQL"),
    (
        "agent/ledger/web/queries.py",
        "import agent.ledger.arbiter",
        "the review page never reaches the intake or the arbiter",
    ),
    (
        "agent/sparkplug/mapping.py",
        "import aiomqtt",
        "the Sparkplug room: its payload, mapping, host rules and window are pure",
    ),
    (
        "agent/store/outbox.py",
        "import agent.sparkplug.payload",
        "sources, store, sinks and core never import the Sparkplug room",
    ),
    # paths imports path_env: the other way too is the circle the house broke (paths <-> yaml_lines)
    ("agent/config/path_env.py", "import agent.config.paths", ACYCLIC),
    ("agent/sources/modbus/decode.py", "import agent.sources.modbus.poller", ACYCLIC),  # a room's room
    ("agent/cli/ledger/context.py", "import agent.cli.ledger.group", ACYCLIC),
    ("devices/plant.py", "import devices.standalone", ACYCLIC),
]


def _tree(tmp: Path) -> Path:
    for name in ("agent", "devices"):
        shutil.copytree(ROOT / name, tmp / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    return tmp


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    if not LINT.exists():
        pytest.skip(f"lint-imports is not installed beside {sys.executable}")
    return subprocess.run([str(LINT)], cwd=tree, capture_output=True, text=True, timeout=120)


def test_the_house_as_it_is_keeps_every_contract(tmp_path: Path) -> None:
    out = _lint(_tree(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "BROKEN" not in out.stdout


@pytest.mark.parametrize(("module", "line", "contract"), BREAKS, ids=[b[0] for b in BREAKS])
def test_a_forbidden_import_breaks_the_contract_that_names_it(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    tree = _tree(tmp_path)
    path = tree / module
    path.write_text(path.read_text() + f"\n{line}  # a deliberate break\n")
    out = _lint(tree)
    assert out.returncode != 0
    assert f"{contract} BROKEN" in out.stdout, out.stdout


def test_docs_architecture_lists_every_contract() -> None:
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    page = (ROOT / "docs" / "architecture.md").read_text()
    missing = [c["name"] for c in contracts if c["name"] not in page]
    assert not missing, f"docs/architecture.md does not name these contracts: {missing}"


def test_docs_architecture_diagram_and_rooms_table_show_every_room() -> None:
    """Every package folder of agent/ (a room) is in the diagram and has its row in the rooms
    table of docs/architecture.md (issue 37: the diagram had left out sparkplug/)."""
    rooms = sorted(p.parent.name for p in (ROOT / "agent").glob("*/__init__.py"))
    page = (ROOT / "docs" / "architecture.md").read_text()
    diagram = page.split("```")[1]
    absent = [r for r in rooms if f" {r}/ " not in diagram]
    assert not absent, f"rooms not in the diagram: {absent}"
    missing = [r for r in rooms if f"\n| `{r}/` |" not in page]
    assert not missing, f"rooms without a row in the rooms table: {missing}"
