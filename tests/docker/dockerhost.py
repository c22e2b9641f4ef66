"""Helpers of the container tests: running commands, the images, timing the stages.

Commands run from the repository root with their output kept for the failure message;
Debian's docker client is used (BuildKit built in). conftest.py holds the fixtures.
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

STAGES: list[tuple[str, float]] = []  # (name, seconds), in the order they ran


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
            STAGES.append((name, seconds))
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


@dataclass(frozen=True)
class Images:
    """The images, built from this tree."""

    agent: str
    workload: str  # Keras on torch: the one the agent starts by default
    workload_tensorflow: str
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
