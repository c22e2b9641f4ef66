"""The images for real: a collector container, an agent container that starts the workload
image through the docker socket, a run that arrives once with the workload image's digest
and survives a restart of the collector on the same volume.

`make test-docker` runs these (CI does, after `make test`). Tiny CPU settings: B0 at
32x32 px on 48 synthetic images, batch 8, 2 epochs.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from dockerhost import DOCKER, REPO, Images, StageClock, run

pytestmark = [pytest.mark.docker, pytest.mark.timeout(2400)]

AGENT_IMAGE_TARGET_BYTES = 300_000_000  # "under 300 MB", as `docker images` counts MB
COMPOSE_FILE = REPO / "docker" / "compose.yaml"
GPUBENCH = str(Path(sys.executable).parent / "gpubench")  # the query CLI of this checkout
HEALTHY_WITHIN_S = 90.0
AGENT_RUN_LIMIT_S = 900.0
WORKLOAD_LABEL = "org.gpubench.role=workload"
# The benchmark run the agent container makes: as small as the protocol allows.
TINY_RUN = [
    "--models", "B0", "--image-size", "32", "--limit-images", "48",
    "--batch", "8", "--epochs", "2",
]  # fmt: skip


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Deployment:
    """The collector of docker/compose.yaml under a project and volume of its own."""

    images: Images
    project: str
    volume: str
    port: int
    agent_container: str
    spool_volume: str
    workload_containers_before: set[str] = field(default_factory=set)

    @property
    def network(self) -> str:
        """The project's network, where the collector answers as `collector`."""
        return f"{self.project}_default"

    @property
    def address(self) -> str:
        """The collector's published address on this host."""
        return f"127.0.0.1:{self.port}"

    def compose(self, *args: str, timeout: float = 120) -> str:
        """Run docker-compose on this project; its stdout."""
        env = {
            "GPUBENCH_COLLECTOR_IMAGE": self.images.collector,
            "GPUBENCH_LISTEN": self.address,
            "GPUBENCH_VOLUME": self.volume,
        }
        command = ["docker-compose", "-p", self.project, "-f", str(COMPOSE_FILE), *args]
        return run(command, timeout=timeout, env=env).stdout

    def collector_container(self) -> str:
        """The collector's container id."""
        container = self.compose("ps", "-q", "collector").strip()
        assert container, "docker-compose knows no collector container"
        return container

    def inspect(self, template: str) -> str:
        """A field of the collector container (a Go template)."""
        return run(
            [DOCKER, "inspect", "--format", template, self.collector_container()], timeout=30
        ).stdout.strip()

    def wait_healthy(self) -> None:
        """Wait until docker's health check (gRPC health inside the container) passes."""
        deadline = time.monotonic() + HEALTHY_WITHIN_S
        status = ""
        while time.monotonic() < deadline:
            status = self.inspect("{{.State.Status}} {{.State.Health.Status}}")
            if status == "running healthy":
                return
            assert status.split()[0] in ("created", "running", "restarting"), (
                f"collector container is {status}:\n{self.logs()}"
            )
            time.sleep(0.5)
        raise AssertionError(
            f"collector not healthy after {HEALTHY_WITHIN_S:.0f} s ({status}):\n{self.logs()}"
        )

    def logs(self) -> str:
        """The collector's output so far."""
        done = run([DOCKER, "logs", self.collector_container()], timeout=30, check=False)
        return done.stdout + done.stderr

    def query(self, token: str, *args: str) -> Any:
        """`gpubench ARGS --format json` from this host against the published port."""
        command = [GPUBENCH, "--collector", self.address, "--token", token, *args]
        return json.loads(run([*command, "--format", "json"], timeout=60).stdout)

    def workload_containers(self) -> set[str]:
        """Ids of every container the agent's docker runner made (running or not)."""
        command = [DOCKER, "ps", "-aq", "--no-trunc", "--filter", f"label={WORKLOAD_LABEL}"]
        done = run(command, timeout=30)
        return set(done.stdout.split())

    def tear_down(self) -> None:
        """Remove the agent and workload containers, the collector, its network and volume."""
        leftovers = self.workload_containers() - self.workload_containers_before
        run([DOCKER, "rm", "-f", self.agent_container, *leftovers], timeout=60, check=False)
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "30")
        run([DOCKER, "volume", "rm", "-f", self.volume, self.spool_volume], timeout=30, check=False)

    def spool_report(self) -> str:
        """What the agent's spool holds (and why a run was refused), to explain a failure."""
        script = "cd /spool && find . -type f | sort && cat */*.reason"
        done = run(
            [DOCKER, "run", "--rm", "-v", f"{self.spool_volume}:/spool", "--entrypoint", "sh",
             self.images.agent, "-c", script],
            timeout=60,
            check=False,
        )  # fmt: skip
        return done.stdout + done.stderr


@pytest.fixture(scope="module")
def deployment(images: Images) -> Iterator[Deployment]:
    """A collector deployment of this test's own, torn down whatever happens."""
    project = f"gpubench-test-{os.getpid()}"
    deployment = Deployment(
        images=images,
        project=project,
        volume=f"{project}-data",
        port=free_port(),
        agent_container=f"{project}-agent",
        spool_volume=f"{project}-spool",
    )
    deployment.workload_containers_before = deployment.workload_containers()
    try:
        yield deployment
    finally:
        deployment.tear_down()


def test_agent_image_is_under_its_size_target(images: Images, stage: StageClock) -> None:
    size = images.size_bytes(images.agent)
    target = f"{AGENT_IMAGE_TARGET_BYTES / 1e6:.0f} MB"
    stage.note(f"{images.agent}: {size / 1e6:.0f} MB (target: under {target})")
    assert size < AGENT_IMAGE_TARGET_BYTES, f"{images.agent}: {size / 1e6:.0f} MB, over {target}"


def test_run_from_the_agent_container_arrives_once_and_survives_a_collector_restart(
    images: Images, deployment: Deployment, stage: StageClock
) -> None:
    with stage("collector container up and healthy"):
        deployment.compose("up", "-d", "--no-build", "collector")
        deployment.wait_healthy()
    assert deployment.inspect("{{.Config.User}}") == "gpubench"

    with stage("token created inside the collector container"):
        done = run(
            [DOCKER, "exec", deployment.collector_container(),
             "gpubench-collector", "token", "create", "docker-test"],
            timeout=60,
        )  # fmt: skip
    token = done.stdout.strip().splitlines()[-1]
    assert token.startswith("gpb_"), f"no token secret on stdout: {done.stdout!r}"

    with stage("agent container run (workload container, B0 32 px, 2 epochs)"):
        agent = run(
            [
                DOCKER, "run", "--name", deployment.agent_container,
                "--network", deployment.network,
                "-v", "/var/run/docker.sock:/var/run/docker.sock",
                "-v", f"{deployment.spool_volume}:/var/lib/gpubench/spool",
                images.agent,
                "--runner", "docker", "--image", images.workload,
                "--collector", "collector:50051", "--token", token,
                *TINY_RUN,
            ],
            timeout=AGENT_RUN_LIMIT_S,
        )  # fmt: skip
    for line in agent.stderr.splitlines():
        if "sent to the collector" in line:
            stage.note(f"agent: {line.strip()}")

    runs = deployment.query(token, "runs", "list")
    assert len(runs) == 1, (
        f"expected the one run, the collector has {len(runs)}: {runs}\n"
        f"agent output:\n{agent.stderr[-3000:]}\nagent spool:\n{deployment.spool_report()}"
    )
    stored = runs[0]
    assert stored["status"] == "ok", stored.get("error_message")
    assert stored["model"] == "B0"
    assert stored["image_size"] == 32
    assert stored["epochs"] == 2
    assert stored["submitter"] == "docker-test"
    assert stored["container_image"] == images.workload
    workload_id = images.id(images.workload)
    assert stored["container_image_digest"] == workload_id, (
        f"recorded digest {stored['container_image_digest']!r}, the image is {workload_id}"
    )
    # The workload container is gone once the run is over.
    assert deployment.workload_containers() == deployment.workload_containers_before

    comparison = deployment.query(token, "compare", "--model", "B0")
    assert [(g["gpu_config"], g["runs"]) for g in comparison["groups"]] == [("CPU", 1)]
    assert comparison["image_size"] == 32

    with stage("collector container stop (SIGTERM) and start on the same volume"):
        deployment.compose("stop", "collector", timeout=90)
        exit_code = deployment.inspect("{{.State.ExitCode}}")
        on_volume = run(
            [DOCKER, "run", "--rm", "-v", f"{deployment.volume}:/data",
             "--entrypoint", "ls", images.collector, "-A", "/data"],
            timeout=60,
        ).stdout.split()  # fmt: skip
        deployment.compose("start", "collector")
        deployment.wait_healthy()
    # Exit 0 (not 137: killed after the grace period), the database checkpointed and closed:
    # no write-ahead log and no local admin credential left behind.
    assert exit_code == "0", f"collector exited {exit_code} on SIGTERM:\n{deployment.logs()}"
    assert "gpubench.duckdb" in on_volume
    assert not [name for name in on_volume if name.endswith(".wal")], on_volume
    stage.note(f"volume after stop: {' '.join(sorted(on_volume))}")

    again = deployment.query(token, "runs", "list")
    assert [r["run_id"] for r in again] == [stored["run_id"]]
    assert again[0]["container_image_digest"] == workload_id
