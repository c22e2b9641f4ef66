"""The test suite's own harness, each in a real pytest run of a process of its own:

- its report fits 80 columns (tests/report_at_80.py): a test that fails with a message of
  600 columns on one line (a command's whole output, say) and one skipped with a long
  reason;
- the tests never see the settings a user exported (tests/conftest.py): `make demo`
  suggests `export GPUBENCH_COLLECTOR=... GPUBENCH_TOKEN=...`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

FAILING = '''
import pytest

def test_fails_with_a_long_message():
    said = " ".join(f"word{n}" for n in range(100))
    assert said == "", said

@pytest.mark.skip(reason=" ".join(["a long reason"] * 20))
def test_skipped():
    pass
'''


def test_a_long_failure_and_a_long_skip_are_reported_within_80_columns(tmp_path: Path) -> None:
    (tmp_path / "test_long.py").write_text(FAILING)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "report_at_80", "-p", "no:cacheprovider",
         "-rfE", "--slowest", "3", "-o", "addopts=", "test_long.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(TESTS), "COLUMNS": "80", "PATH": "/usr/bin:/bin",
             "CI": "1"},  # on CI pytest cuts no summary line short: the worst case
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "word99" in out and "a long reason" in out, out  # nothing left out
    assert "FAILED test_long.py::test_fails_with_a_long_message" in out, out
    long = [line for line in out.splitlines() if len(line) > 80]
    assert not long, "\n".join(long)


SEES = '''
import os

def test_sees():
    print("SEEN", sorted(n for n in os.environ if n.startswith("GPUBENCH_")))
'''


def test_the_users_gpubench_settings_never_reach_a_test(tmp_path: Path) -> None:
    (tmp_path / "test_sees.py").write_text(SEES)
    exported = {"GPUBENCH_COLLECTOR": "127.0.0.1:50051", "GPUBENCH_TOKEN": "secret",
                "GPUBENCH_SPOOL": str(tmp_path / "spool"), "GPUBENCH_COLLECTOR_DB": "x.duckdb",
                "GPUBENCH_TEST_PYTHON_IMAGE": "python:local"}  # the last: the harness's own
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-s",
         "-o", "addopts=", "test_sees.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(TESTS), "PATH": "/usr/bin:/bin", **exported})
    assert done.returncode == 0, done.stdout + done.stderr
    # GPUBENCH_STATE: the temporary folder tests/conftest.py gives every test.
    assert "SEEN ['GPUBENCH_STATE', 'GPUBENCH_TEST_PYTHON_IMAGE']" in done.stdout, done.stdout
