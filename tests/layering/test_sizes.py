"""Size guards (issue 37): no module in `agent/` over 400 lines, no function over 60 (docstring
included), except those on the allow-list below, each a known debt to split (never add to it:
split the function instead). The list may only shrink: an entry that is back under the limit
fails too, so it is taken off when it is fixed."""

from __future__ import annotations

import ast
from pathlib import Path

AGENT = Path(__file__).resolve().parents[2] / "agent"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

# (module, function): over the limit when the guard came (2026-12-06); issue 37 asks for them split.
ALLOWED_LONG_FUNCTIONS = {
    ("store/outbox.py", "settle_and_claim_prepared"),  # a third of it is its docstring
}


def modules() -> list[Path]:
    return sorted(AGENT.rglob("*.py"))


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(p.relative_to(AGENT)): n
        for p in modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by what they hold): {long}"


def long_functions() -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for p in modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    found[(str(p.relative_to(AGENT)), node.name)] = n
    return found


def test_no_function_is_over_60_lines_but_the_known_ones() -> None:
    found = long_functions()
    new = {k: v for k, v in found.items() if k not in ALLOWED_LONG_FUNCTIONS}
    assert not new, f"functions over {MAX_FUNCTION_LINES} lines (split them): {new}"
    fixed = ALLOWED_LONG_FUNCTIONS - set(found)
    assert not fixed, f"back under {MAX_FUNCTION_LINES} lines: take them off ALLOWED_LONG_FUNCTIONS: {fixed}"
