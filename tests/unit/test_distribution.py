"""The distribution's name: PyPI's `gpubench` is an unrelated project, so this one is
`gpubench-keras` (gpubench.versions.DISTRIBUTION). Every place that reads the name agrees, the
commands say their version without asking pip's metadata, and nothing documented
installs the other project. The sdist and the wheel build offline from a copy with no git,
and the wheel alone carries the code, the commands and the version it was built with."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import site
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


# What a build needs from the tree (as docker/*.Dockerfile copy it), and a version handed
# to it as docker/build.sh hands the images' builds theirs: a copy with no git has no tag.
BUILT_FROM = ("pyproject.toml", "setup.py", "README.md", "MANIFEST.in", "protos", "gpubench",
              "agent", "collector")
HANDED_VERSION = "9.8.7"
COMMANDS = ("gpubench", "gpubench-agent", "gpubench-collector")


def _build_env() -> dict[str, str]:
    """This environment less what would point a build or a command at the checkout."""
    env = {name: value for name, value in os.environ.items()
           if name != "PYTHONPATH" and not name.startswith("SETUPTOOLS_SCM")}
    env["SETUPTOOLS_SCM_PRETEND_VERSION_FOR_GPUBENCH_KERAS"] = HANDED_VERSION
    return env


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel built from the sdist, as the release builds them (python -m
    build; offline: the build's requirements are the dev extra's), from a copy of the tree
    with no git and nothing a previous build left."""
    source = tmp_path_factory.mktemp("source")
    leftovers = shutil.ignore_patterns("__pycache__", "*_pb2*", "_version.py", "*.egg-info")
    for name in BUILT_FROM:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=leftovers)
        else:
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                           str(out), str(source)], capture_output=True, text=True,
                          env=_build_env(), timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_the_sdist_and_wheel_carry_the_version_they_were_built_with(built: Path) -> None:
    names = sorted(path.name for path in built.iterdir())
    assert names == [f"gpubench_keras-{HANDED_VERSION}-py3-none-any.whl",
                     f"gpubench_keras-{HANDED_VERSION}.tar.gz"]
    # What the release job checks before it publishes: the metadata and the README render.
    done = subprocess.run([sys.executable, "-m", "twine", "check", "--strict",
                           *map(str, built.iterdir())], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_wheel_alone_carries_the_code_and_the_commands(built: Path, tmp_path: Path) -> None:
    """Installed with --no-deps into an empty virtual environment, the wheel brings every
    module it runs (the wire code generated at build too) and the three commands, which say
    the version it was built with. The dependencies are this environment's, seen through a
    .pth file (its paths alone: its .pth files, an editable install's among them, are not
    run)."""
    fresh = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True,
                   timeout=120)
    python = fresh / "bin" / "python"
    wheel = next(built.glob("*.whl"))
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--no-deps", "--no-index", "--quiet", str(wheel)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    # Where pip installed the wheel (Debian's Python lists more site folders than that).
    own = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))")
               .strip())
    (own / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    # The Python API's names too (gpubench/__init__.py): `from gpubench import Client`.
    loaded = _run(python, "-c", "from gpubench import Client, __version__; "
                  "import gpubench.agent.cli, gpubench.collector.cli, "
                  "gpubench.cli, gpubench.v1.run_pb2, sys; print('\\n'.join("
                  "m.__file__ for n, m in sorted(sys.modules.items()) "
                  "if n.startswith('gpubench') and getattr(m, '__file__', None)))").split()
    assert len(loaded) > 20, loaded
    assert [path for path in loaded if not Path(path).is_relative_to(own)] == []
    for command in COMMANDS:
        output = _run(fresh / "bin" / command, "--version")
        assert output.strip() == f"{command}, version {HANDED_VERSION}"


def _run(*command: str | Path) -> str:
    """A command's output, run with no path back to the checkout."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    done = subprocess.run(list(map(str, command)), capture_output=True, text=True, env=env,
                          cwd=Path(command[0]).parent, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
