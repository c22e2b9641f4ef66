"""The code's version can be traced to its commit where no tag names it: a `git archive`
copy of a repository with no tag yet built "0.0", the version of every command, record
and wheel, whatever the commit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpubench.versions import traced

ROOT = Path(__file__).resolve().parents[2]


def test_an_untagged_version_carries_its_commit() -> None:
    assert traced("0.0", "bc71eadb5e") == "0.0+gbc71eadb5e"
    assert traced("0.0", "gbc71ead") == "0.0+gbc71ead"
    assert traced("0.0", None) == "0.0"  # no git at all: nothing to trace
    assert traced("0.2.0", "bc71eadb5e") == "0.2.0"  # a tag names it
    assert traced("0.2.1.dev3+gbc71ead", "bc71ead") == "0.2.1.dev3+gbc71ead"


@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None,
                    reason="needs this project as a git checkout, for `git archive`")
def test_a_git_archive_copy_says_its_commit(tmp_path: Path) -> None:
    """What a user of a `git archive` tarball gets: setuptools-scm, as the build runs it,
    writes gpubench/_version.py, and the version the commands say names the commit."""
    pytest.importorskip("setuptools_scm")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive, check=True)
    # This tree's reading of the version, on the committed tree's stamp.
    shutil.copyfile(ROOT / "gpubench" / "versions.py", tmp_path / "gpubench" / "versions.py")
    subprocess.run([sys.executable, "-m", "setuptools_scm", "--force-write-version-files"],
                   cwd=tmp_path, check=True, capture_output=True)
    said = subprocess.run(
        [sys.executable, "-c", "from gpubench.versions import VERSION; print(VERSION)"],
        cwd=tmp_path, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        check=True, capture_output=True, text=True).stdout.strip()
    described = subprocess.run(["git", "-C", str(ROOT), "describe", "--tags", "--match",
                                "v[0-9]*"], capture_output=True, text=True)
    if described.returncode == 0:  # a tag behind HEAD: its version, with the commit
        assert said != "0.0" and head[:7] in said, said
    else:
        assert said.startswith("0.0+g") and head.startswith(said.removeprefix("0.0+g")), said
