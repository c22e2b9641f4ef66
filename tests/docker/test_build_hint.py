"""docker/build.sh where no registry answers (part of `make test`, no engine needed):
a build whose public base image cannot be pulled points to LOCAL_BASE=1.

The docker client is a stand-in (DOCKER=...) that fails `build` with the words
BuildKit uses for a base image it cannot fetch, or with a failing RUN step; the
real engine's build is `make test-docker`'s."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNPULLED = """#3 [internal] load metadata for docker.io/library/python:3.11-slim
#3 ERROR: failed to do request: Head "https://registry-1.docker.io/v2/library/python/\
manifests/3.11-slim": dial tcp: lookup registry-1.docker.io: no such host
failed to solve with frontend dockerfile.v0: failed to create LLB definition: failed to do \
request: Head "https://registry-1.docker.io/v2/library/python/manifests/3.11-slim": dial \
tcp: lookup registry-1.docker.io: no such host"""
STEP_FAILED = """#9 [build 4/9] RUN python3 /tmp/build/requirements.py
#9 ERROR: executor failed running [/bin/sh -c python3 /tmp/build/requirements.py]: exit code: 1
failed to solve: executor failed running [/bin/sh -c python3 /tmp/build/requirements.py]: \
exit code: 1"""


def _client(tmp_path: Path, says: str) -> Path:
    """A docker client whose `build` fails saying `says`."""
    script = tmp_path / "docker"
    (tmp_path / "says.txt").write_text(says + "\n")
    script.write_text(f"#!/bin/sh\n[ \"$1\" = build ] || exit 0\ncat {tmp_path / 'says.txt'} >&2\n"
                      "exit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.mark.parametrize(("says", "hinted"), [(UNPULLED, True), (STEP_FAILED, False)],
                         ids=["base-not-pulled", "a-step-failed"])
def test_a_base_image_that_cannot_be_pulled_points_to_local_base(tmp_path: Path, says: str,
                                                                hinted: bool) -> None:
    done = subprocess.run(["bash", str(REPO / "docker" / "build.sh"), "collector"],
                          env={**os.environ, "DOCKER": str(_client(tmp_path, says))},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert "build: gpubench-collector:latest failed" in done.stderr
    assert ("make -C docker LOCAL_BASE=1" in done.stderr) is hinted, done.stderr
