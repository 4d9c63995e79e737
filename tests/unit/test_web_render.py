"""The review page's templates (issue 37): every value escaped and its invisible characters made
visible, whatever template it goes through; an unknown name is an error, never an empty string;
no template carries a script, an inline style or a way around the escaping."""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources

import jinja2
import pytest
from markupsafe import Markup

from agent.ledger.web.render import ENV, shown

HOSTILE = '<script>alert(1)</script>" onmouseover="x'


def test_a_value_is_escaped_and_its_controls_shown_as_escapes() -> None:
    assert shown(HOSTILE) == ("&lt;script&gt;alert(1)&lt;/script&gt;&quot; onmouseover=&quot;x")
    assert shown("Pumpe \u202eevil\u202c\x1b[31m") == "Pumpe \\u202eevil\\u202c\\x1b[31m"
    assert shown("two\nlines") == "two\nlines"  # a <pre> keeps its lines
    assert shown(None) == '<span class="none">-</span>'
    assert shown(True) == "yes" and shown(False) == "no"
    assert shown(datetime(2026, 4, 22, 8, 0, tzinfo=UTC)) == "2026-04-22T08:00:00.000Z"
    assert shown(Markup("<br>")) == "<br>"


def test_every_expression_of_a_template_goes_through_shown() -> None:
    t = ENV.from_string('<p title="{{ v }}">{{ v }} {{ v ~ "!" }} {{ none_value }}</p>')
    out = t.render(v=HOSTILE + "\u202e", none_value=None)
    assert "<script" not in out and '" onmouseover="' not in out and "\u202e" not in out
    assert out.count("\\u202e") == 3
    assert out.endswith('<span class="none">-</span></p>')


def test_an_unknown_name_is_an_error() -> None:
    with pytest.raises(jinja2.UndefinedError):
        ENV.from_string("{{ missing }}").render()
    with pytest.raises(jinja2.UndefinedError):
        ENV.from_string("{{ row.missing }}").render(row={"id": 1})


def test_the_templates_compile_and_carry_no_script_no_inline_style_no_escape_hatch() -> None:
    folder = resources.files("agent.ledger.web").joinpath("templates")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".html"))
    assert "base.html" in names and len(names) >= 10
    for name in names:
        ENV.get_template(name)
        text = folder.joinpath(name).read_text(encoding="utf-8")
        for banned in ("<script", "style=", "<style", "|safe", "autoescape false", "Markup("):
            assert banned not in text, (name, banned)
