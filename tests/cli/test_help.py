"""Every command teaches: it has help text, and `--help` works (a command without help fails here)."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from agent.cli.main import cli


def all_commands(
    group: click.Group, prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], click.Command]]:
    out: list[tuple[tuple[str, ...], click.Command]] = []
    for name, cmd in sorted(group.commands.items()):
        out.append(((*prefix, name), cmd))
        if isinstance(cmd, click.Group):
            out += all_commands(cmd, (*prefix, name))
    return out


COMMANDS = all_commands(cli)


def test_the_expected_commands_exist() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {
        "import",
        "report",
        "pending",
        "boots",
        "run",
        "status",
        "check",
        "demo",
        "simulate",
        "outbox",
        "replay",
        "prune",
    } <= names


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_command_has_help_text(path: tuple[str, ...], cmd: click.Command) -> None:
    assert cmd.help and len(cmd.help.strip()) > 40, (
        f"`edge-agent {' '.join(path)}` needs a docstring that teaches"
    )
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output
    for param in cmd.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help, f"option {param.opts} of `{' '.join(path)}` has no help"


def test_simulate_help_is_the_simulators_own() -> None:
    result = CliRunner().invoke(cli, ["simulate", "--help"], prog_name="edge-agent")
    assert result.exit_code == 0, result.output
    assert "Usage: edge-agent simulate [OPTIONS]" in result.output
    for option in ("--modbus-port", "--controllers", "--scenario", "--random", "--commands", "--user"):
        assert option in result.output


def test_the_command_line_starts_without_the_protocol_stacks() -> None:
    probe = "import sys, agent.cli.main; print(sorted({'asyncua', 'pymodbus'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
