"""CSV cells a spreadsheet opens as text, never as a formula (OWASP "CSV injection").

A PLC's channel name, a gateway's name or an evidence text that begins with `=`, `+`, `-`, `@`,
a tab or a carriage return is taken by Excel, LibreOffice and Google Sheets as the start of a
formula when the file is opened. Such a cell is written with a leading `'` (OWASP's advice), which
the spreadsheet shows as text and does not display. Only text cells are touched: numbers,
booleans and empty cells are written as they are, and the JSON exports stay exact.
"""

from __future__ import annotations

from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> Any:
    """`value` for a CSV cell: text that would start a formula gets a leading `'`."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def safe_row(values: list[Any]) -> list[Any]:
    return [safe_cell(v) for v in values]
