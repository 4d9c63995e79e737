"""The ledger's report for people: the same table style as the gateway's `report`
(`agent.cli.render`), with the ledger's evidence (gateways, via, notifications). Rows in, lines
out; the CLI reads the rows and prints the lines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.cli import render

EVENT_COLUMNS = (
    ("id", "canonical_id"),
    ("source", "source"),
    ("transitionId", "transitionId"),
    ("bootId", "bootId"),
    ("sourceTimestamp", "sourceTimestamp"),
    ("first arrivalAt", "first_arrival"),
    ("status", "status"),
    ("arrivals", "arrivals"),
    ("gateways", "gateways"),
    ("repeats", "duplicate_count"),
    ("conflicts", "conflict_count"),
    ("payload", "payload"),
)

PENDING_COLUMNS = (
    ("arrival", "arrival_id"),
    ("gateway", "gateway"),
    ("via", "via"),
    ("source", "source"),
    ("transitionId", "transitionId"),
    ("bootId", "bootId"),
    ("arrivalAt", "arrivalAt"),
    ("reason", "reason"),
)

NOTIFICATION_COLUMNS = (
    ("id", "notification_id"),
    ("state", "state"),
    ("kind", "kind"),
    ("event", "canonical_id"),
    ("attempts", "attempts"),
    ("due at", "due_at"),
    ("sent at", "sent_at"),
    ("last error", "last_error"),
)


def summary_lines(summary: dict[str, int], notifications: Sequence[dict[str, Any]]) -> list[str]:
    s = summary
    states: dict[str, int] = {}
    for n in notifications:
        states[n["state"]] = states.get(n["state"], 0) + 1
    by_state = ", ".join(f"{k} {v}" for k, v in sorted(states.items())) or "none"
    return [
        f"source events (canonical): {s['source_events']}",
        f"arrivals:                  {s['arrivals']}  (inserted {s['inserted']}, duplicate {s['duplicates']}"
        f" (same content), conflict {s['conflicts']}, identity_incomplete {s['identity_incomplete']},"
        f" rejected {s['rejected']}, beyond_horizon {s.get('beyond_horizon', 0)})",
        f"open conflicts:            {s['conflicts_open']}",
        f"boots observed:            {s['boots']}",
        f"gaps / anomalies:          {s['gaps']} / {s['anomalies']}",
        f"notifications:             {len(notifications)}  ({by_state})",
    ]


def section(title: str, rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> list[str]:
    """A titled table, or nothing when there are no rows."""
    if not rows:
        return []
    return ["", title, *render.table(render.headers_of(columns), cells(rows, columns))]


def cells(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> list[list[Any]]:
    out = render.rows_of(rows, columns)
    for i, (_, field) in enumerate(columns):
        if field == "gateways":
            for row in out:
                row[i] = ",".join(row[i] or [])
        elif field == "attempts":
            for row, r in zip(out, rows, strict=True):
                row[i] = f"{r['attempts']}/{r['max_attempts']}"
    return out


def conflict_lines(found: Sequence[dict[str, Any]]) -> list[str]:
    """Per open conflict: its key, then the canonical (kept) and the conflicting original side by side."""
    if not found:
        return []
    out = ["", f"open conflicts (a key seen again with other content; both originals kept): {len(found)}"]
    for c in found:
        a, b = c["canonical"], c["conflicting"]
        out.append(
            f"conflict arrival {c['arrival_id']}: {render.cell(c['source'])}  transitionId"
            f" {render.cell(c['transitionId'])}  bootId {render.cell(c['bootId'])}"
            f"  (canonical event {c['canonical_id']})"
        )
        rows = [
            [field, a.get(key), b.get(key)]
            for field, key in (
                ("gateway", "gateway"),
                ("arrivalAt", "arrivalAt"),
                ("sourceTimestamp", "sourceTimestamp"),
                ("payload_hash", "payload_hash"),
                ("payload", "payload"),
            )
        ]
        out += ["  " + line for line in render.table(["", "canonical (kept)", "conflicting"], rows, 64)]
    return out


def notification_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """`ledger notifications` for people: a table, then each dead row's last error in full."""
    if not rows:
        return ["no notifications"]
    out = render.table(render.headers_of(NOTIFICATION_COLUMNS), cells(rows, NOTIFICATION_COLUMNS))
    dead = [r for r in rows if r["state"] == "dead"]
    for r in dead:
        out.append("")
        out += render.wrapped(f"dead {r['notification_id']} ({r['url']})", r["last_error"] or "-", indent=0)
    if dead:
        out.append("")
        out.append(
            f"{len(dead)} dead: `edge-agent ledger notifications retry` makes them pending again"
            " (after the receiver is fixed)."
        )
    return out
