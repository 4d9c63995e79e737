"""What people read never carries raw bytes or control characters: stored evidence (a source name
with an ESC in it, a raw line) is shown escaped in tables and wrapped text, and a byte string read
from a device is named by its length and hex, not its Python repr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent.cli import render
from agent.cli.main import cli
from agent.sources.readings import BadValue, identity_number


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("PUMP-07/Trip", "PUMP-07/Trip"),
        ("Pumpe Süd – Störung", "Pumpe Süd – Störung"),
        ("a\nb\tc\rd", "a\\nb\\tc\\rd"),
        ("\x1b[31mRED\x1b[0m", "\\x1b[31mRED\\x1b[0m"),
        ("bell\x07 nul\x00 del\x7f", "bell\\x07 nul\\x00 del\\x7f"),
        ("line\u2028sep", "line\\u2028sep"),
    ],
)
def test_control_characters_are_escaped_for_people(text: str, shown: str) -> None:
    assert render.printable(text) == shown
    assert render.cell(text) == shown
    assert "".join(line.strip() for line in render.wrapped("raw", text, columns=200)) == f"raw: {shown}"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"\x00\x01\x02", "3 bytes (0x000102) is not a whole number"),
        (b"\xff" * 64, "64 bytes (0xffffffffffffffff...) is not a whole number"),
        ("T91", "'T91' is not a whole number"),
    ],
)
def test_a_byte_string_read_from_a_device_is_named_not_dumped(value: object, message: str) -> None:
    with pytest.raises(BadValue) as err:
        identity_number(value)
    assert str(err.value) == message
    assert "\\x" not in str(err.value) and "b'" not in str(err.value)


def test_an_escape_sequence_in_a_source_name_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    capture = tmp_path / "capture.jsonl"
    line = {"source": "PUMP-07/\u001b[2JTrip", "transitionId": "T1", "payload": {"state": "Trip"}}
    capture.write_text(json.dumps(line) + "\n", encoding="utf-8")
    db = tmp_path / "events.db"
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", str(db), "import", str(capture)]).exit_code == 0
    for listing in (["pending"], ["review", "pending"]):
        result = runner.invoke(cli, ["--db", str(db), *listing])
        assert result.exit_code == 0 and "\x1b" not in result.stdout, result.stdout
        assert "PUMP-07/\\x1b[2JTrip" in result.stdout, result.stdout
