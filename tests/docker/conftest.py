"""Fixtures of the container tests: the docker engine, the three images, stage timings.

These tests use the real engine of this machine (docker/engine.sh installs and starts it
where it is missing) and build the real images from docker/ on the local base image
(docker/base-image.sh), so they run where no registry is reachable. Each stage's time is
shown as it ends and again in a table at the end of the session.

They skip (rather than fail) when the engine cannot be had here - not root, or docker
cannot be installed - except in CI (CI=true), where they must run.
"""

from __future__ import annotations

import pytest
from dockerhost import (
    DOCKER,
    ENGINE_CANNOT_INSTALL,
    ENGINE_NOT_ROOT,
    IN_CI,
    STAGES,
    TAG,
    Images,
    StageClock,
    run,
)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The stage timings, in the order they ran."""
    if not STAGES:
        return
    terminalreporter.section("docker stages")
    for name, seconds in STAGES:
        terminalreporter.write_line(f"{seconds:8.1f} s  {name}")
    terminalreporter.write_line(f"{sum(s for _, s in STAGES):8.1f} s  in all")


@pytest.fixture(scope="session")
def stage(pytestconfig: pytest.Config) -> StageClock:
    """The stage clock of this session."""
    return StageClock(pytestconfig)


@pytest.fixture(scope="session")
def docker_engine(stage: StageClock) -> str:
    """A running docker engine (installed and started if need be); the client's path."""
    with stage("docker engine"):
        done = run(["docker/engine.sh"], timeout=600, check=False)
    if done.returncode in (ENGINE_NOT_ROOT, ENGINE_CANNOT_INSTALL) and not IN_CI:
        pytest.skip(f"no docker engine on this machine: {done.stderr.strip()}")
    assert done.returncode == 0, f"docker/engine.sh failed:\n{done.stderr}"
    return DOCKER


@pytest.fixture(scope="session")
def images(docker_engine: str, stage: StageClock) -> Images:
    """gpubench-agent, -workload (torch, and :tensorflow) and -collector, built on the
    local base image.

    Built layers and the pip cache stay on the engine between sessions, so a rerun only
    rebuilds what changed; the images are kept too (they are the product, not test debris).
    """
    with stage("base image (debootstrap + import, cached)"):
        base = run(["docker/base-image.sh"], timeout=900).stdout.strip()
    stage.note(f"base image {base}")
    # As docker/README.md's build block says (make -C docker LOCAL_BASE=1), one image at
    # a time so that each one's time shows.
    for name in ("agent", "workload", "workload-tensorflow", "collector"):
        with stage(f"build gpubench-{name}"):
            run(["make", "-s", "-C", "docker", "LOCAL_BASE=1", f"TAG={TAG}", name],
                timeout=1200)
    return Images(
        agent=f"gpubench-agent:{TAG}",
        workload=f"gpubench-workload:{TAG}",
        workload_tensorflow="gpubench-workload:tensorflow",
        collector=f"gpubench-collector:{TAG}",
    )
