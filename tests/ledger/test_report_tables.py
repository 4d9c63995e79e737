"""The ledger's text for people (agent/cli/ledger/tables.py): rows in, lines out."""

from __future__ import annotations

import pytest


def _note(i: int, state: str, error: str | None = None) -> dict[str, object]:
    return {
        "notification_id": i,
        "canonical_id": 10 + i,
        "kind": "sms",
        "idempotency_key": f"k{i}",
        "state": state,
        "attempts": 3,
        "max_attempts": 3 if state == "dead" else 20,
        "last_error": error,
        "sent_at": None,
        "url": "http://127.0.0.1:9/hook",
        "due_at": "2026-04-22T08:00:00.000Z",
    }


def test_the_notification_listing_for_people_is_a_table_and_spells_out_dead_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agent.cli.ledger.tables import notification_lines

    # The width a pipe gets (render.width()'s fallback): a narrower terminal (pytest-xdist's
    # workers see COLUMNS=80) puts the long `dead 2 (url):` label on a line of its own.
    monkeypatch.setenv("COLUMNS", "100")

    assert notification_lines([]) == ["no notifications"]
    lines = notification_lines([_note(1, "sent"), _note(2, "dead", "HTTP 500 from the receiver\x1b[31m")])
    assert lines[0].split() == [
        "id",
        "state",
        "kind",
        "event",
        "attempts",
        "due",
        "at",
        "sent",
        "at",
        "last",
        "error",
    ]
    assert lines[2].split()[:5] == ["1", "sent", "sms", "11", "3/20"]
    assert lines[3].split()[:5] == ["2", "dead", "sms", "12", "3/3"]
    assert "dead 2 (http://127.0.0.1:9/hook): HTTP 500 from the receiver\\x1b[31m" in lines
    assert "\x1b" not in "".join(lines), "control characters are escaped"
    assert lines[-1].startswith("1 dead: `edge-agent ledger notifications retry`")
