"""The test suite's own harness, each in a real pytest run of a process of its own:

- its report fits 80 columns (tests/report_at_80.py): a test that fails with a message of
  600 columns on one line (a command's whole output, say) and one skipped with a long
  reason;
- the tests never see the settings a user exported (tests/conftest.py): `make demo`
  suggests `export GPUBENCH_COLLECTOR=... GPUBENCH_TOKEN=...`;
- the session's temporary files (tmp_path, what its commands make) leave nothing in the
  system's temporary folder once every test passed, and stay for a look when one failed.
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
         "-q", "-rfE", "--slowest", "3", "-o", "addopts=", "test_long.py"],
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


LEAVES = '''
import os
import subprocess
import tempfile

def test_leaves(tmp_path):
    (tmp_path / "a-file").write_text("x")
    made = subprocess.run(["mktemp"], capture_output=True, text=True, check=True).stdout
    print("MADE", tmp_path, made.strip(), tempfile.mkdtemp())
    assert os.environ.get("FAIL") != "1"
'''


def _session(tmp_path: Path, fail: bool) -> tuple[str, list[Path]]:
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir(exist_ok=True)
    (tmp_path / "test_leaves.py").write_text(LEAVES)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-s",
         "-o", "addopts=", "test_leaves.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(TESTS), "PATH": "/usr/bin:/bin", "TMPDIR": str(system_tmp),
             "FAIL": "1" if fail else "0"})
    assert done.returncode == (1 if fail else 0), done.stdout + done.stderr
    [made] = [line.partition("MADE ")[2].split() for line in done.stdout.splitlines()
              if "MADE " in line]
    return done.stdout, [Path(path) for path in made]


def test_a_passing_session_leaves_no_temporary_file(tmp_path: Path) -> None:
    _, made = _session(tmp_path, fail=False)
    assert all(not path.exists() for path in made), made
    assert not list((tmp_path / "system-tmp").iterdir())  # pytest-of-*, tmp.*: none


def test_a_failing_session_keeps_them_and_says_where(tmp_path: Path) -> None:
    out, made = _session(tmp_path, fail=True)
    [kept] = list((tmp_path / "system-tmp").iterdir())
    assert f"temporary files kept in {kept}" in out
    assert all(path.exists() and kept in path.parents for path in made), made
