"""The release workflow's order and guards, and the pull request's image builds being the
release's own (read as text: the workflows are YAML, and no YAML parser is a dependency).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKFLOWS = Path(__file__).resolve().parents[2] / ".github" / "workflows"
RELEASE = (WORKFLOWS / "release.yml").read_text()
IMAGES = (WORKFLOWS / "images.yml").read_text()


def between(text: str, start: str, end: str) -> str:
    """The text from `start` up to (not including) the next `end`."""
    begin = text.index(start)
    return text[begin:text.index(end, begin + len(start))]


def job(text: str, name: str) -> str:
    """One job's block: from `  NAME:` to the next job or the end."""
    found = re.search(rf"^  {name}:\n(.*?)(?=^  [\w-]+:\n|\Z)", text, re.M | re.S)
    assert found, f"no job {name}"
    return found.group(1)


def test_a_pull_request_builds_every_release_image_as_the_release_does() -> None:
    assert between(IMAGES, "  dist:\n", "  images:\n") == between(RELEASE, "  dist:\n",
                                                                   "  images:\n")
    matrix = "        include:\n", "    env:\n"
    assert between(IMAGES, *matrix) == between(RELEASE, *matrix)
    build = "      - uses: docker/build-push-action", "          provenance: mode=max"
    assert between(IMAGES, *build) == between(RELEASE, *build)
    assert "free disk" in job(IMAGES, "images")
    # Nothing pushed, signed or tagged from a pull request.
    assert "PUBLISH: false" in job(IMAGES, "images")
    for word in ("packages: write", "id-token", "login-action", "cosign", "environment"):
        assert word not in IMAGES
    for path in ("docker/**", "pyproject.toml", ".github/workflows/**"):
        assert f'"{path}"' in between(IMAGES, "  pull_request:\n", "  workflow_dispatch:")


def test_every_card_of_the_catalogue_has_a_torch_image() -> None:
    keys = re.findall(r"^            key: (\S+)$", RELEASE, re.M)
    assert keys == ["agent", "workload", "workload-cu129", "workload-tensorflow",
                    "collector"]
    assert "FRAMEWORK_INDEX=https://download.pytorch.org/whl/cu129" in RELEASE


def test_pypi_only_after_the_images_and_the_tags_last() -> None:
    assert "push-by-digest=true" in job(RELEASE, "images")
    assert "GPUBENCH_WHEEL=${{ needs.dist.outputs.wheel }}" in job(RELEASE, "images")
    assert "needs: [dist, images]\n" in job(RELEASE, "pypi")
    assert "needs: [dist, images, pypi]\n" in job(RELEASE, "tags")
    for name in ("pypi", "tags"):
        assert "if: github.event_name == 'push'" in job(RELEASE, name)
    # The protected environment guards every job that pushes or uploads.
    assert "environment: release\n" in job(RELEASE, "images")
    assert "environment: release\n" in job(RELEASE, "tags")
    assert "name: release\n" in job(RELEASE, "pypi")
    assert "cancel-in-progress: false" in between(RELEASE, "concurrency:", "jobs:")


def test_the_release_checks_the_registry_the_agent_starts_images_from() -> None:
    from gpubench.agent.runners import docker

    # The dist job's sed reads REGISTRY from the source as this does.
    source = Path(docker.__file__).read_text()
    assert re.findall(r'^REGISTRY = "(.*)"$', source, re.M) == [docker.REGISTRY]
    assert "agent/gpubench/agent/runners/docker.py" in job(RELEASE, "dist")


def test_tools_and_cosign_are_pinned() -> None:
    dist = job(RELEASE, "dist")
    for tool in ("build", "twine", "setuptools-scm", "setuptools", "wheel", "grpcio-tools"):
        assert re.search(rf"\b{tool}==\d", dist), tool
    assert re.search(r"cosign-release: v3\.\d+\.\d+\n", RELEASE)


@pytest.mark.parametrize("linter", [["actionlint"], ["zizmor", "--offline", "--quiet"]])
def test_the_workflows_pass_the_linters(linter: list[str]) -> None:
    found = shutil.which(linter[0], path=str(Path(sys.executable).parent)) or \
        shutil.which(linter[0])
    if found is None:
        pytest.skip(f"{linter[0]} is not installed (the dev extra brings it)")
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    done = subprocess.run([found, *linter[1:], *files], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
