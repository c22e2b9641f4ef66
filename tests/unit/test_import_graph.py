"""The import picture of docs/architecture.md holds over the whole tree (tests/import_graph.py).

No module imports a layer its own may not import, no import loop, every `gpubench.*`
import resolves to a file of the three source roots, and ruff, told those roots
(pyproject.toml), finds nothing. The check is shown to catch each kind of fault on a
small tree of its own.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import import_graph  # noqa: E402

ROOT = import_graph.ROOT


def test_no_import_goes_up_or_across_and_none_loops() -> None:
    assert import_graph.faults() == []


def test_the_architecture_document_draws_the_layers_the_check_holds() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert "\n".join(import_graph.picture()) in text
    assert "tests/unit/test_import_graph.py" in text


def test_every_module_of_the_three_parts_is_in_one_layer() -> None:
    known = import_graph.modules()
    assert "gpubench.agent.cli" in known and "gpubench.collector.store" in known
    assert "gpubench.record" in known
    for name in known:
        import_graph.layer_of(name)  # raises for a module of no layer


def _write(root: Path, relative: str, text: str = "") -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_check_finds_an_upward_import_a_loop_and_an_unknown_module(tmp_path: Path) -> None:
    for folder in ("tests", "bench", "scripts"):
        (tmp_path / folder).mkdir()
    _write(tmp_path, "gpubench/record.py", "from gpubench.agent import cli\n")
    _write(tmp_path, "agent/gpubench/agent/__init__.py")
    _write(tmp_path, "agent/gpubench/agent/cli.py",
           "from gpubench.collector import store\nfrom gpubench import record\n")
    _write(tmp_path, "agent/gpubench/agent/workload/__init__.py")
    _write(tmp_path, "agent/gpubench/agent/workload/a.py",
           "def later():\n    from gpubench.agent.workload import b\n")
    _write(tmp_path, "agent/gpubench/agent/workload/b.py",
           "from typing import TYPE_CHECKING\nfrom . import a\n"
           "if TYPE_CHECKING:\n    from gpubench.agent import cli\n")
    _write(tmp_path, "collector/gpubench/collector/__init__.py")
    _write(tmp_path, "collector/gpubench/collector/store.py", "import gpubench.collector.gone\n")
    found = import_graph.faults(tmp_path)
    assert any("gpubench.agent.cli:1 imports gpubench.collector.store" in f
               and "agent may not import collector" in f for f in found), found
    assert any("gpubench.record:1 imports gpubench.agent.cli" in f for f in found), found
    assert any(f.startswith("loop among:") and "workload.a" in f and "workload.b" in f
               for f in found), found
    assert any("unresolved:" in f and "gpubench.collector.gone" in f for f in found), found
    # the TYPE_CHECKING import of b is no edge: the workload imports no agent module
    assert not any("workload.b" in f and "imports gpubench.agent.cli" in f for f in found)


def test_a_lazy_import_of_a_packages_own_module_is_followed(tmp_path: Path) -> None:
    for folder in ("tests", "bench", "scripts"):
        (tmp_path / folder).mkdir()
    _write(tmp_path, "gpubench/record.py")
    _write(tmp_path, "agent/gpubench/agent/__init__.py")
    _write(tmp_path, "agent/gpubench/agent/workload/__init__.py")
    _write(tmp_path, "agent/gpubench/agent/workload/frameworks/__init__.py",
           "import importlib\ndef get(m):\n"
           "    return importlib.import_module(f'{__name__}.{m}')\n")
    _write(tmp_path, "agent/gpubench/agent/workload/frameworks/torch.py",
           "from gpubench.agent.workload import memory\n")
    _write(tmp_path, "agent/gpubench/agent/workload/memory.py",
           "from gpubench.agent.workload import frameworks\n")
    found = import_graph.faults(tmp_path)
    assert any(f.startswith("loop among:") and "frameworks.torch" in f and "memory" in f
               for f in found), found


@pytest.mark.skipif(shutil.which("ruff", path=str(Path(sys.executable).parent)) is None,
                    reason="ruff is part of the dev install")
def test_ruff_told_the_source_roots_finds_nothing() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    done = subprocess.run([ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


@pytest.mark.skipif(shutil.which("ruff", path=str(Path(sys.executable).parent)) is None,
                    reason="ruff is part of the dev install")
def test_ruff_leaves_what_a_build_writes_alone(tmp_path: Path) -> None:
    """A from-source `pip install .` leaves build/ (and a wheel build dist/): the project's
    ruff settings lint neither, nor the tools `make test` fetches into .tools/; the same
    fault in the project's own folders is still found."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    shutil.copyfile(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for folder in ("build/lib/gpubench", "dist", ".tools/haproxy/usr/lib"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "leftover.py").write_text("import os\n")  # F401

    def lint() -> subprocess.CompletedProcess[str]:
        return subprocess.run([ruff, "check", "--no-cache", "."], cwd=tmp_path,
                              capture_output=True, text=True)

    assert lint().returncode == 0, lint().stdout[-2000:]
    (tmp_path / "gpubench").mkdir()
    (tmp_path / "gpubench" / "fault.py").write_text("import os\n")
    found = lint()
    assert found.returncode == 1 and "gpubench/fault.py" in found.stdout, found.stdout
