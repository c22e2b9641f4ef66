"""Fixtures of the container tests: the docker engine, the three images, stage timings.

These tests use the real engine of this machine (docker/engine.sh installs and starts it
where it is missing) and build the real images from docker/ on the local base image
(docker/base-image.sh), so they run where no registry is reachable. Each stage's time is
shown as it ends and again in a table at the end of the session.

They skip (rather than fail) when the engine cannot be had here - not root, or docker
cannot be installed - except in CI (CI=true), where they must run.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = "/usr/bin/docker"  # Debian's client: BuildKit built in (see docker/engine.sh)
IN_CI = os.environ.get("CI", "").lower() == "true"
TAG = "latest"

# engine.sh's exit codes for "not possible on this machine" (not a failure of ours).
ENGINE_NOT_ROOT = 77
ENGINE_CANNOT_INSTALL = 78

_STAGES: list[tuple[str, float]] = []


class StageClock:
    """Times named stages; prints each as it ends (past output capture) and keeps them."""

    def __init__(self, config: pytest.Config) -> None:
        self._reporter = config.pluginmanager.get_plugin("terminalreporter")
        self._capture = config.pluginmanager.get_plugin("capturemanager")

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            seconds = time.monotonic() - start
            _STAGES.append((name, seconds))
            self.note(f"{name}: {seconds:.1f} s")

    def note(self, line: str) -> None:
        """Show one line on the terminal now, whatever pytest captures."""
        if self._reporter is None:
            return
        if self._capture is None:
            self._reporter.write_line(f"[docker] {line}")
            return
        with self._capture.global_and_fixture_disabled():
            self._reporter.write_line(f"[docker] {line}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The stage timings, in the order they ran."""
    if not _STAGES:
        return
    terminalreporter.section("docker stages")
    for name, seconds in _STAGES:
        terminalreporter.write_line(f"{seconds:8.1f} s  {name}")
    terminalreporter.write_line(f"{sum(s for _, s in _STAGES):8.1f} s  in all")


def run(
    command: Sequence[str],
    *,
    timeout: float,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command from the repository root; on failure the error shows its output."""
    try:
        done = subprocess.run(
            list(command),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"{' '.join(command)}: still running after {timeout:.0f} s\n"
            f"--- stdout ---\n{_tail(exc.stdout)}\n--- stderr ---\n{_tail(exc.stderr)}"
        ) from None
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(command)}: exit code {done.returncode}\n"
            f"--- stdout ---\n{_tail(done.stdout)}\n--- stderr ---\n{_tail(done.stderr)}"
        )
    return done


def _tail(text: str | bytes | None, lines: int = 60) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join((text or "").splitlines()[-lines:])


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


@dataclass(frozen=True)
class Images:
    """The three images, built from this tree."""

    agent: str
    workload: str
    collector: str

    def size_bytes(self, image: str) -> int:
        """The image's size as the engine reports it."""
        return int(self._inspect(image, "{{.Size}}"))

    def id(self, image: str) -> str:
        """The image's Id ('sha256:...')."""
        return self._inspect(image, "{{.Id}}")

    @staticmethod
    def _inspect(image: str, template: str) -> str:
        command = [DOCKER, "image", "inspect", "--format", template, image]
        return run(command, timeout=30).stdout.strip()


@pytest.fixture(scope="session")
def images(docker_engine: str, stage: StageClock) -> Images:
    """gpubench-agent, -workload and -collector, built on the local base image.

    Built layers and the pip cache stay on the engine between sessions, so a rerun only
    rebuilds what changed; the images are kept too (they are the product, not test debris).
    """
    with stage("base image (debootstrap + import, cached)"):
        base = run(["docker/base-image.sh"], timeout=900).stdout.strip()
    stage.note(f"base image {base}")
    for name in ("agent", "workload", "collector"):
        with stage(f"build gpubench-{name}"):
            run(["docker/build.sh", "--local-base", "--tag", TAG, name], timeout=1200)
    return Images(
        agent=f"gpubench-agent:{TAG}",
        workload=f"gpubench-workload:{TAG}",
        collector=f"gpubench-collector:{TAG}",
    )
