"""The writer's page cache: `import` raises it for the file's duration; the service keeps SQLite's own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agent.cli.records import IMPORT_PAGE_CACHE_KIB
from agent.store.store import Store

ROOT = Path(__file__).resolve().parents[2]


async def cache_kib(store: Store) -> int:
    rows = list(await store.db.execute_fetchall("PRAGMA cache_size"))
    return -int(rows[0][0])


async def test_set_page_cache_sets_the_writers_cache_and_nothing_else(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "s.db", check=False) as store:
        assert await cache_kib(store) == 2000  # SQLite's default, which the service keeps
        await store.set_page_cache(IMPORT_PAGE_CACHE_KIB)
        assert await cache_kib(store) == IMPORT_PAGE_CACHE_KIB
    async with await Store.open(tmp_path / "s.db", check=False) as store:
        assert await cache_kib(store) == 2000  # per connection: not kept in the file


def test_an_import_with_the_larger_cache_decides_re_deliveries_from_anywhere_in_the_history(
    tmp_path: Path,
) -> None:
    # Re-deliveries of keys recorded many batches before: each is a duplicate of its first line.
    lines = [
        json.dumps({"source": f"P-{k % 7}/Trip", "transitionId": str(k), "bootId": "B1", "payload": {"v": k}})
        for k in range(3000)
    ]
    lines += [lines[k] for k in (2999, 0, 1500, 7, 2998)]
    file = tmp_path / "in.jsonl"
    file.write_text("\n".join(lines) + "\n")
    out = subprocess.run(
        [sys.executable, "-m", "agent", "--db", str(tmp_path / "s.db"), "import", str(file), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    results = [json.loads(r) for r in out.splitlines()]
    assert [r["decision"] for r in results[:3000]] == ["inserted"] * 3000
    assert [(r["decision"], r["duplicate_of"]) for r in results[3000:]] == [
        ("duplicate", 3000),
        ("duplicate", 1),
        ("duplicate", 1501),
        ("duplicate", 8),
        ("duplicate", 2999),
    ]
