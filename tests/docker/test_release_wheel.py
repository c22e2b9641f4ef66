"""The images install a given wheel, as the release installs the one it uploads to PyPI
(GPUBENCH_WHEEL; docker/build.sh --wheel), and an agent of a release version starts the
published workload image of its own version.

A wheel of this tree is built under a release version no checkout has (the tag's
version, as setuptools-scm reads it, through SETUPTOOLS_SCM_PRETEND_VERSION), and the
agent, torch workload and collector images built FROM the local base with it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from dockerhost import DOCKER, REPO, run

from gpubench.agent.runners.docker import REGISTRY

pytestmark = [pytest.mark.docker, pytest.mark.timeout(2400)]

VERSION = "9.8.7"  # a release version, never a checkout's
TAG = "release-wheel-test"


# Each image built from the wheel, and the command in it that says the version.
IMAGES = {"agent": "gpubench-agent", "workload": "gpubench-agent",
          "collector": "gpubench-collector"}


@pytest.fixture(scope="module")
def built(docker_engine: str, tmp_path_factory: pytest.TempPathFactory):
    """gpubench-agent, -workload and -collector:TAG, built with a wheel of version
    VERSION; removed after."""
    out = tmp_path_factory.mktemp("dist")
    # The build writes the version it is given into the tree's gpubench/_version.py
    # (setuptools-scm's version_file): the checkout's own is put back, so that the tests
    # after these do not run as a release of VERSION.
    version_file = REPO / "gpubench" / "_version.py"
    kept = version_file.read_bytes() if version_file.exists() else None
    try:
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
             str(REPO)], timeout=600, env={"SETUPTOOLS_SCM_PRETEND_VERSION": VERSION})
    finally:
        if kept is None:
            version_file.unlink(missing_ok=True)
        else:
            version_file.write_bytes(kept)
    [wheel] = out.glob("*.whl")
    assert wheel.name.startswith(f"gpubench_keras-{VERSION}-")
    try:
        run(["docker/build.sh", "--local-base", "--wheel", str(wheel), "--tag", TAG, *IMAGES],
            timeout=2400)
        yield
    finally:
        for name in IMAGES:
            run([DOCKER, "image", "rm", "-f", f"gpubench-{name}:{TAG}"], timeout=60,
                check=False)
        Path(REPO / "docker" / "wheels" / wheel.name).unlink(missing_ok=True)


@pytest.fixture
def agent_image(built: None) -> str:
    return f"gpubench-agent:{TAG}"


def in_image(image: str, *command: str) -> str:
    return run([DOCKER, "run", "--rm", "--entrypoint", command[0], image, *command[1:]],
               timeout=120).stdout.strip()


@pytest.mark.parametrize("name", list(IMAGES))
def test_each_image_runs_the_wheel_it_was_given(built: None, name: str) -> None:
    image, command = f"gpubench-{name}:{TAG}", IMAGES[name]
    assert in_image(image, command, "--version") == f"{command}, version {VERSION}"
    label = run([DOCKER, "image", "inspect", "--format",
                 '{{index .Config.Labels "org.opencontainers.image.version"}}', image],
                timeout=30).stdout.strip()
    assert label == VERSION


def test_a_released_agent_starts_the_published_workload_of_its_version(
        agent_image: str) -> None:
    said = in_image(agent_image, "python", "-c",
                    "from gpubench.agent.runners.docker import DEFAULT_IMAGE; "
                    "print(DEFAULT_IMAGE)")
    assert said == f"{REGISTRY}/gpubench-workload:{VERSION}"
    # Where no --image is given: the agent's own --help shows the default it starts.
    help_text = " ".join(in_image(agent_image, "gpubench-agent", "run", "--help").split())
    assert f"[default: {REGISTRY}/gpubench-workload:{VERSION}]" in help_text
