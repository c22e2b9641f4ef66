"""`gpubench-collector` where the collector extra is not installed (README's agent
install, `pip install '.[agent,workload]'`): each command that needs the database says
which extra to install, in one line and exit 2, not a traceback. A real process, with
DuckDB made unimportable in it as an install without the extra has it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpubench import record

WITHOUT_DUCKDB = (
    "import sys\n"
    "sys.modules['duckdb'] = None  # what an install without the collector extra has\n"
    "from gpubench.collector.cli import main\n"
    "main(sys.argv[1:])\n"
)


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["token", "create", "lab"],
                                     ["token", "list"], ["backup", "copy"],
                                     ["import", "run.json"]],
                         ids=["serve", "token-create", "token-list", "backup", "import"])
def test_a_command_without_the_collector_extra_names_it(tmp_path: Path, make_run: Any,
                                                        command: list[str]) -> None:
    db = tmp_path / "collector.duckdb"
    db.write_bytes(b"")  # there, so that the command goes as far as opening it
    (tmp_path / "run.json").write_text(record.to_json(make_run()))
    done = subprocess.run([sys.executable, "-c", WITHOUT_DUCKDB, *command, "--db", str(db)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "COLUMNS": "80"})
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert ("gpubench-collector: the collector needs the collector extra, which is not "
            "installed (no module 'duckdb'): pip install 'gpubench-keras[collector]'") in said
    assert all(len(line) <= 80 for line in done.stderr.splitlines()), done.stderr
