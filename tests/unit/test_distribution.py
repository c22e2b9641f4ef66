"""The distribution's name: PyPI's `gpubench` is an unrelated project, so this one is
`gpubench-keras` (gpubench.versions.DISTRIBUTION). Every place that reads the name agrees, the
commands say their version without asking pip's metadata, and nothing documented
installs the other project."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib

from gpubench import versions

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# Folders that hold no documentation or code of the project.
SKIPPED = {".git", ".venv", ".demo", "build", "dist", "__pycache__", "node_modules"}
PIP_INSTALL = re.compile(r"pip3?\s+install\s+([^\n`]*)")


def normalised(name: str) -> str:
    """A distribution name as pip compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_distribution_is_not_the_unrelated_pypi_project() -> None:
    assert PROJECT["name"] == versions.DISTRIBUTION
    assert normalised(versions.DISTRIBUTION) != "gpubench"


def test_extras_name_the_project_by_its_distribution_name() -> None:
    named = [line for lines in PROJECT["optional-dependencies"].values() for line in lines
             if line.startswith("gpubench")]
    assert named, "the all and dev extras refer to the project's other extras"
    for line in named:
        assert normalised(line.partition("[")[0]) == normalised(versions.DISTRIBUTION), line


def test_the_image_requirements_expand_the_projects_own_extras() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "docker" / "requirements.py"),
                           str(ROOT / "pyproject.toml"), "all"],
                          capture_output=True, text=True, check=True)
    lines = done.stdout.split()
    assert "duckdb>=1.1" in lines and "matplotlib>=3.8" in lines
    assert not [line for line in lines if line.startswith("gpubench")], lines


def _documented_installs() -> list[tuple[Path, str]]:
    found = []
    for path in ROOT.rglob("*"):
        if SKIPPED.intersection(path.relative_to(ROOT).parts) or not path.is_file():
            continue
        if path.suffix not in (".md", ".py", ".sh", ".toml") and "Makefile" not in path.name \
                and "Dockerfile" not in path.name:
            continue
        for match in PIP_INSTALL.finditer(path.read_text(errors="replace")):
            found.append((path.relative_to(ROOT), match.group(1)))
    return found


def test_nothing_documented_installs_pypis_gpubench() -> None:
    installs = _documented_installs()
    assert any(path.name == "README.md" for path, _ in installs)
    for path, arguments in installs:
        for word in arguments.split():
            word = word.strip("'\"(),;")
            if not word or word.startswith(("-", ".", "/", "$")):
                continue
            name = re.split(r"[\[<>=!~@ ]", word, maxsplit=1)[0]
            assert normalised(name) != "gpubench", f"{path}: pip install {arguments}"


@pytest.mark.parametrize("command", ["gpubench", "gpubench-agent", "gpubench-collector"])
def test_version_needs_no_distribution_metadata(command: str, monkeypatch) -> None:
    """A copy installed under the new name (or run from a checkout) has no `gpubench`
    distribution to ask, and must not find the unrelated one's."""
    from gpubench.agent.cli import main as agent
    from gpubench.cli import cli as query
    from gpubench.collector.cli import cli as collector

    def no_metadata(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", no_metadata)
    group = {"gpubench": query, "gpubench-agent": agent, "gpubench-collector": collector}[command]
    done = CliRunner().invoke(group, ["--version"])
    assert done.exit_code == 0, done.output
    assert done.output.strip() == f"{command}, version {versions.VERSION}"
