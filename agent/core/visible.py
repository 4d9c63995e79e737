"""Text shown to people with every invisible or controlling character made visible.

Stored evidence can hold any character. A terminal must never receive an ESC raw (it would
restyle the terminal), and no screen should receive the bidirectional controls (U+202A-U+202E,
U+2066-U+2069) or other format characters raw: `Pumpe U+202E evil U+202C` displays as "Pumpe live",
hiding what the PLC or gateway really sent. Every character that is not printable (Python's
`str.isprintable`: control, format, separator and unassigned characters) is written as an
escape (`\\x1b`, `\\u202e`, `\\n`), except a plain space and what the caller keeps (a page keeps
newlines, which HTML shows as white space or, in a `<pre>`, as the line breaks of indented JSON).
"""

from __future__ import annotations

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(text: str, keep: str = "") -> str:
    """`text` with every non-printable character (but a space and those in `keep`) escaped."""
    if text.isprintable():
        return text
    return "".join(
        ch
        if ch.isprintable() or ch == " " or ch in keep
        else _ESCAPES.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        for ch in text
    )
