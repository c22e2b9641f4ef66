"""docker/engine.sh where someone else installed docker: it asks the engine first and
installs only what is missing.

Each case runs engine.sh as root in a container of the local base image with no network,
so that any apt-get it tried would fail (exit 78) rather than pass unseen. GitHub's
ubuntu-24.04 runner has Docker CE: the client at /usr/bin/docker, dockerd at
/usr/bin/dockerd (not Debian's /usr/sbin), the engine running. The container is given
that layout from this machine's own engine: its client and its dockerd at those paths,
its socket, and its debootstrap and Compose (installed here by engine.sh).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dockerhost import DOCKER, REPO, run

pytestmark = pytest.mark.docker

ENGINE_SH = REPO / "docker" / "engine.sh"
TOOLS = ("/usr/sbin/debootstrap", "/usr/share/debootstrap")
# Where Docker CE's packages put Compose v2 (`docker compose`).
COMPOSE_PLUGINS = ("/usr/libexec/docker/cli-plugins/docker-compose",
                   "/usr/local/lib/docker/cli-plugins/docker-compose")


@pytest.fixture(scope="module")
def base(docker_engine: str) -> str:
    """The local base image (bash, apt-get, no docker)."""
    return run(["docker/base-image.sh"], timeout=900).stdout.strip()


def engine_sh(base: str, *mounts: tuple[str, str], wait_s: int = 60):
    """engine.sh in a container of `base` with these read-only mounts (host, inside)."""
    volumes = [f"--volume={host}:{inside}:ro" for host, inside in mounts]
    return run([DOCKER, "run", "--rm", "--network", "none", *volumes,
                f"--volume={ENGINE_SH}:/engine.sh:ro",
                "--env", f"GPUBENCH_DOCKERD_WAIT_S={wait_s}", base, "bash", "/engine.sh"],
               timeout=300, check=False)


def tools() -> list[tuple[str, str]]:
    """debootstrap, and docker-compose or Compose v2's client plugin, as this machine has
    them (engine.sh installed what was missing), at the same paths."""
    compose = shutil.which("docker-compose") or next(
        (path for path in COMPOSE_PLUGINS if Path(path).exists()), None)
    if compose is None or not Path(TOOLS[0]).exists():
        pytest.skip("this machine has no debootstrap, or no docker-compose nor compose "
                    "plugin (engine.sh installs them)")
    return [(path, path) for path in (*TOOLS, compose)]


def dockerd() -> str:
    found = shutil.which("dockerd") or "/usr/sbin/dockerd"
    assert Path(found).exists(), "the engine's dockerd is not where engine.sh put it"
    return found


def test_a_running_engine_installed_as_on_githubs_runner_is_used_as_it_is(base: str) -> None:
    done = engine_sh(base, (DOCKER, "/usr/bin/docker"), (dockerd(), "/usr/bin/dockerd"),
                     ("/var/run/docker.sock", "/var/run/docker.sock"), *tools())
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("engine: running ("), done.stderr
    assert "installing" not in done.stderr


def test_an_installed_engine_that_is_stopped_is_started_not_reinstalled(base: str) -> None:
    # No socket: the engine does not answer; its dockerd is installed at /usr/bin.
    done = engine_sh(base, (DOCKER, "/usr/bin/docker"), (dockerd(), "/usr/bin/dockerd"),
                     *tools(), wait_s=2)
    assert "engine: starting /usr/bin/dockerd" in done.stderr, done.stderr
    assert "installing" not in done.stderr
    # dockerd cannot run in an unprivileged container: it did not come up.
    assert done.returncode == 1, done.stderr


def test_with_no_docker_at_all_it_installs_debians(base: str) -> None:
    done = engine_sh(base, *tools())
    assert "engine: installing docker.io" in done.stderr, done.stderr
    assert done.returncode == 78, done.stderr  # no network here: apt-get cannot
