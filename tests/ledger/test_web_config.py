"""The `metrics:`, `web:` and `status_topic` settings of ledger.yaml: defaults, and each mistake
named with file:line as every other setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.ledger import config

HTTP = "http: {listen: '127.0.0.1:1'}\n"


def test_defaults_and_values(tmp_path: Path) -> None:
    f = tmp_path / "ledger.yaml"
    f.write_text(HTTP)
    plain = config.load(f)
    assert plain.metrics is None and plain.web is None and plain.status_topic == "+/status/+"
    token = tmp_path / "t"
    token.write_text("x\n")
    f.write_text(
        HTTP + f"metrics: {{}}\nweb: {{token_file: '{token}', silent_after_s: 60}}\nstatus_topic: a/+\n"
    )
    got = config.load(f)
    assert (got.metrics.host, got.metrics.port) == ("127.0.0.1", 9109)  # type: ignore[union-attr]
    assert got.web is not None and (got.web.host, got.web.port, got.web.silent_after_s) == (
        "127.0.0.1",
        8089,
        60.0,
    )
    assert got.web.token_file == str(token) and got.status_topic == "a/+"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("metrics: {listen: nowhere}\n", ":2: metrics.listen: 'nowhere' must be host:port"),
        ("web: {listen: '127.0.0.1:0'}\n", ":2: web.listen:"),
        ("web: {silent_after_s: 0}\n", ":2: web.silent_after_s: 0 must be a number of seconds"),
        ("web: {token_file: /no/such/file}\n", ":2: web.token_file: /no/such/file cannot be read"),
        ("web: {colour: red}\n", ":2: web.colour: unknown key"),
    ],
)
def test_mistakes_name_file_and_line(tmp_path: Path, text: str, expected: str) -> None:
    f = tmp_path / "ledger.yaml"
    f.write_text(HTTP + text)
    with pytest.raises(config.ConfigProblems) as info:
        config.load(f)
    assert expected in str(info.value) and str(f) in str(info.value)
