"""What the unit and the docs point people at exists: after the README's install steps, or in the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
UNIT = ROOT / "systemd" / "edge-agent.service"


def install_block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("#### Install as a service", 1)[1]
    return section.split("```sh", 1)[1].split("```", 1)[0]


def test_the_units_documentation_is_a_file_the_install_steps_create() -> None:
    documented = re.findall(r"^Documentation=file://(\S+)$", UNIT.read_text(), re.MULTILINE)
    assert documented, "the unit names its documentation"
    installed = set(re.findall(r"^sudo install\b.*\s(/\S+)", install_block(), re.MULTILINE))
    for path in documented:
        assert path in installed, f"{path} is not created by the README's install steps"


def test_docs_point_at_repository_files_that_exist() -> None:
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"`((?:spec|docs)/[\w./-]+\.md)`", doc.read_text()):
            assert (ROOT / target).exists(), f"{doc.name} points at {target}, which does not exist"
