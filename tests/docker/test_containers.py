"""docker/README.md's commands, run as written: the collector from compose.yaml, the agent
container on the collector's network and on the host's, the workload image alone, a run
kept on the spool volume while the collector is down and pushed once it is back.

`make test-docker` runs these (CI does, after `make test`). The blocks come from the
README itself (readme_blocks.py), with the test's own names for the network, volumes,
project and port. Every run is the README's small CPU example: B0 (`--quick`) at 32 px on
1280 synthetic images.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from dockerhost import DOCKER, REPO, Images, StageClock, run
from readme_blocks import RUN_BY_TESTS, Names, blocks, localise

pytestmark = [pytest.mark.docker, pytest.mark.timeout(2400)]

AGENT_IMAGE_TARGET_BYTES = 300_000_000  # "under 300 MB", as `docker images` counts MB
COMPOSE_FILE = REPO / "docker" / "compose.yaml"
GPUBENCH = str(Path(sys.executable).parent / "gpubench")  # the query CLI of this checkout
HEALTHY_WITHIN_S = 90.0
BLOCK_LIMIT_S = 900.0
PREFLIGHT_WITHIN_S = 120.0
WORKLOAD_LABEL = "org.gpubench.role=workload"
EXIT_UNREACHABLE = 3  # gpubench-agent: collector unreachable, runs kept
EXIT_INTERRUPTED = 130
README = blocks()
# Lines the agent prints: the preflight's verdicts, and the first line of any training.
REACHED = re.compile(r"collector \S+: token '[^']+' may submit runs")
UNREACHED = re.compile(r"cannot reach the collector at \S+")
TRAINING = re.compile(r"^B0: ")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def compose_v2(env: dict[str, str]) -> bool:
    """Whether `docker compose` (v2) works here; otherwise the blocks use docker-compose."""
    done = subprocess.run(["docker", "compose", "version"], capture_output=True, env=env)
    return done.returncode == 0


def first_line(lines: list[str], pattern: re.Pattern[str]) -> int | None:
    """The index of the first line matching `pattern`, or None."""
    return next((i for i, line in enumerate(lines) if pattern.search(line)), None)


@dataclass
class Deployment:
    """The README's deployment under names of this test's own, torn down at the end."""

    images: Images
    project: str
    port: int
    bin_dir: Path
    token: str = ""
    ran: list[str] = field(default_factory=list)
    workload_containers_before: set[str] = field(default_factory=set)

    @property
    def volume(self) -> str:
        return f"{self.project}-data"

    @property
    def spool_volume(self) -> str:
        return f"{self.project}-spool"

    @property
    def network(self) -> str:
        return f"{self.project}-net"

    @property
    def address(self) -> str:
        """The collector's published address on this host."""
        return f"127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What the blocks run with: compose.yaml's names, $TOKEN, Debian's docker first."""
        return {
            "PATH": f"{self.bin_dir}:{os.environ['PATH']}",
            "COMPOSE_PROJECT_NAME": self.project,
            "GPUBENCH_COLLECTOR_IMAGE": self.images.collector,
            "GPUBENCH_LISTEN": self.address,
            "GPUBENCH_VOLUME": self.volume,
            "GPUBENCH_SPOOL_VOLUME": self.spool_volume,
            "GPUBENCH_NETWORK": self.network,
            "TOKEN": self.token,
            "GPUBENCH_TOKEN": self.token,  # the collector block exports it
        }

    def names(self) -> Names:
        return Names(self.network, self.spool_volume, self.port, compose_v2(self.env()))

    def script(self, name: str, *, expect: tuple[str, ...]) -> str:
        """README block `name` with this deployment's names; noted as run."""
        self.ran.append(name)
        return localise(name, README[name], self.names(), expect=expect)

    def block(
        self, name: str, *, expect: tuple[str, ...], exit_code: int = 0, tail: str = ""
    ) -> subprocess.CompletedProcess[str]:
        """Run README block `name` (and `tail`, the test's own lines after it) in bash."""
        script = self.script(name, expect=expect) + tail
        done = run(["bash", "-euo", "pipefail", "-c", script], timeout=BLOCK_LIMIT_S,
                   check=False, env=self.env())
        assert done.returncode == exit_code, (
            f"block {name!r} exited {done.returncode}, not {exit_code}:\n{script}\n"
            f"--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}"
        )
        return done

    def block_until(
        self, name: str, script: str, pattern: re.Pattern[str]
    ) -> tuple[subprocess.Popen[str], list[str]]:
        """Start a block in the background; its output lines until one matches `pattern`."""
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script], cwd=REPO, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, **self.env()}, start_new_session=True,
        )  # fmt: skip
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        seen: list[str] = []
        deadline = time.monotonic() + PREFLIGHT_WITHIN_S
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            seen.append(line)
            if pattern.search(line):
                return process, seen
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"block {name!r}: no line matching {pattern.pattern!r}:\n"
                             + "\n".join(seen[-40:]))

    def compose(self, *args: str, timeout: float = 120) -> str:
        """docker-compose on this project (the test's own steps, not the README's)."""
        command = ["docker-compose", "-f", str(COMPOSE_FILE), *args]
        return run(command, timeout=timeout, env=self.env()).stdout

    def collector_container(self) -> str:
        container = self.compose("ps", "-q", "collector").strip()
        assert container, "docker-compose knows no collector container"
        return container

    def inspect(self, template: str, container: str | None = None) -> str:
        """A field of a container (the collector's by default), as a Go template gives it."""
        container = container or self.collector_container()
        command = [DOCKER, "inspect", "--format", template, container]
        return run(command, timeout=30).stdout.strip()

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
        done = run([DOCKER, "logs", self.collector_container()], timeout=30, check=False)
        return done.stdout + done.stderr

    def query(self, *args: str) -> Any:
        """`gpubench ARGS --format json` from this host against the published port."""
        command = [GPUBENCH, "--collector", self.address, "--token", self.token, *args]
        return json.loads(run([*command, "--format", "json"], timeout=60).stdout)

    def spool(self) -> dict[str, Any]:
        """`gpubench-agent status --json` of the spool volume."""
        done = run(
            [DOCKER, "run", "--rm", "-v", f"{self.spool_volume}:/var/lib/gpubench/spool",
             self.images.agent, "gpubench-agent", "status", "--json"],
            timeout=60,
        )  # fmt: skip
        return json.loads(done.stdout)

    def workload_containers(self) -> set[str]:
        """Ids of every container the agent's docker runner made (running or not)."""
        command = [DOCKER, "ps", "-aq", "--no-trunc", "--filter", f"label={WORKLOAD_LABEL}"]
        return set(run(command, timeout=30).stdout.split())

    def wait_for_workload_containers(self, within_s: float = 30.0) -> None:
        """Wait until the workload containers are those there were before the test: the
        engine may still be removing the one a stopped agent removed."""
        deadline = time.monotonic() + within_s
        while self.workload_containers() != self.workload_containers_before:
            assert time.monotonic() < deadline, (
                f"workload containers left behind: "
                f"{self.workload_containers() - self.workload_containers_before}")
            time.sleep(0.5)

    def agent_containers(self) -> list[str]:
        """Running containers of the agent image."""
        command = [DOCKER, "ps", "-q", "--filter", f"ancestor={self.images.agent}"]
        return run(command, timeout=30).stdout.split()

    def stop_agent(self, process: subprocess.Popen[str]) -> tuple[int, str]:
        """`docker stop` the one running agent container; its exit code and the rest of
        its output."""
        containers = self.agent_containers()
        assert len(containers) == 1, f"expected one agent container running: {containers}"
        run([DOCKER, "stop", "-t", "60", containers[0]], timeout=90)
        try:
            rest, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
        return process.returncode, rest

    def interrupt(self, process: subprocess.Popen[str]) -> tuple[int, str]:
        """Ctrl-C on `docker run` (SIGINT to its process group, as a terminal sends it;
        docker run hands it to the container); its exit code and the rest of its output."""
        os.killpg(process.pid, signal.SIGINT)
        try:
            rest, _ = process.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
        return process.returncode, rest

    def tear_down(self) -> None:
        """Remove the agent and workload containers, the collector, network and volumes."""
        leftovers = self.workload_containers() - self.workload_containers_before
        running = self.agent_containers()
        if leftovers or running:
            run([DOCKER, "rm", "-f", *leftovers, *running], timeout=60, check=False)
        run(["docker-compose", "-f", str(COMPOSE_FILE), "down", "--volumes",
             "--remove-orphans", "--timeout", "30"], timeout=120, check=False, env=self.env())
        run([DOCKER, "volume", "rm", "-f", self.volume, self.spool_volume], timeout=30,
            check=False)


@pytest.fixture(scope="module")
def deployment(
    images: Images, stage: StageClock, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """The README's collector under this test's own names, with its token."""
    bin_dir = tmp_path_factory.mktemp("bin")
    # `docker` in the blocks is Debian's client, as everywhere in these tests.
    (bin_dir / "docker").symlink_to(DOCKER)
    deployment = Deployment(
        images=images, project=f"gpubench-test-{os.getpid()}", port=free_port(),
        bin_dir=bin_dir,
    )  # fmt: skip
    deployment.workload_containers_before = deployment.workload_containers()
    compose = "docker compose (v2)" if deployment.names().compose_v2 else "docker-compose (v1)"
    stage.note(f"README blocks run with {compose}")
    try:
        with stage("README block collector: compose up, wait, token"):
            done = deployment.block(
                "collector", expect=("compose",), tail='\nprintf "TOKEN=%s\\n" "$TOKEN"\n'
            )
        deployment.token = done.stdout.strip().splitlines()[-1].removeprefix("TOKEN=")
        assert deployment.token.startswith("gpb_"), f"no token: {done.stdout!r}"
        # Not root: the user gpubench, named by its number in the image (USER 10001:10001).
        assert deployment.inspect("{{.Config.User}}") == "10001:10001"
        who = run([DOCKER, "exec", deployment.collector_container(), "id", "-un"], timeout=30)
        assert who.stdout.strip() == "gpubench"
        # The block waits for the collector itself (gpubench-healthcheck --wait); docker's
        # own health status follows at its next check (every 5 s).
        deployment.wait_healthy()
        yield deployment
    finally:
        deployment.tear_down()


def test_agent_image_is_under_its_size_target(images: Images, stage: StageClock) -> None:
    size = images.size_bytes(images.agent)
    target = f"{AGENT_IMAGE_TARGET_BYTES / 1e6:.0f} MB"
    stage.note(f"{images.agent}: {size / 1e6:.0f} MB (target: under {target})")
    assert size < AGENT_IMAGE_TARGET_BYTES, f"{images.agent}: {size / 1e6:.0f} MB, over {target}"


def test_the_agent_container_run_arrives(
    images: Images, deployment: Deployment, stage: StageClock
) -> None:
    with stage("README block agent-cpu (workload container, B0 32 px)"):
        agent = deployment.block("agent-cpu", expect=("network", "spool"))
    assert "note:" not in agent.stderr, agent.stderr  # spool on a volume, collector answers

    runs = deployment.query("runs", "list")
    assert len(runs) == 1, f"expected the one run, the collector has {len(runs)}: {runs}"
    stored = runs[0]
    assert stored["status"] == "ok", stored.get("error_message")
    timed = (stored["model"], stored["image_size"], stored["timed_batch_per_gpu"])
    assert timed == ("B0", 32, 128), stored
    assert stored["submitter"] == "alice"
    assert stored["container_image"] == images.workload
    workload_id = images.id(images.workload)
    assert stored["container_image_digest"] == workload_id, (
        f"recorded digest {stored['container_image_digest']!r}, the image is {workload_id}"
    )
    # The workload container is gone once the run is over.
    assert deployment.workload_containers() == deployment.workload_containers_before
    comparison = deployment.query("compare", "--model", "B0")
    assert [(g["gpu_config"], g["runs"]) for g in comparison["groups"]] == [("CPU", 1)]

    with stage("README block runs-list"):
        listed = deployment.block("runs-list", expect=("compose",))
    assert stored["run_id"][:8] in listed.stdout, listed.stdout


def test_the_agent_reaches_the_collector_on_the_host_network(
    deployment: Deployment, stage: StageClock
) -> None:
    script = deployment.script("agent-host-network", expect=("spool", "port"))
    with stage("README block agent-host-network, to the collector's answer, docker stop"):
        process, seen = deployment.block_until("agent-host-network", script, REACHED)
        code, rest = deployment.stop_agent(process)
    # Stopped by `docker stop` (SIGINT, the images' STOPSIGNAL) as by Ctrl-C: exit 130, and
    # the agent removed the workload container it may have started.
    assert code == EXIT_INTERRUPTED, "\n".join(seen) + rest
    deployment.wait_for_workload_containers()

    # The mistake the table warns of: the same command on docker's own network, where
    # 127.0.0.1 is the container's own. Said before any training, with how to reach it.
    # Stopped with Ctrl-C on `docker run` this time.
    wrong = script.replace("--network host ", "")
    assert wrong != script
    with stage("agent container, 127.0.0.1 on docker's network: said up front, Ctrl-C"):
        process, seen = deployment.block_until("agent-host-network", wrong, UNREACHED)
        code, rest = deployment.interrupt(process)
    said = "\n".join(seen)
    assert first_line(seen, TRAINING) is None, f"training started before the warning:\n{said}"
    assert "note: nothing answers at 127.0.0.1" in said + rest, said + rest
    assert "--network host" in said + rest
    assert code == EXIT_INTERRUPTED, said + rest
    assert deployment.workload_containers() == deployment.workload_containers_before


def test_a_run_kept_on_the_spool_volume_arrives_once_the_collector_is_back(
    images: Images, deployment: Deployment, stage: StageClock
) -> None:
    before = {r["run_id"] for r in deployment.query("runs", "list")}
    assert before, "the agent-cpu run should be stored by now"

    with stage("collector container stop (SIGTERM)"):
        deployment.compose("stop", "collector", timeout=90)
        exit_code = deployment.inspect("{{.State.ExitCode}}")
        on_volume = run(
            [DOCKER, "run", "--rm", "-v", f"{deployment.volume}:/data",
             "--entrypoint", "ls", images.collector, "-A", "/data"],
            timeout=60,
        ).stdout.split()  # fmt: skip
    # Exit 0 (not 137: killed after the grace period), the database checkpointed and closed:
    # no write-ahead log and no local admin credential left behind.
    assert exit_code == "0", f"collector exited {exit_code} on SIGTERM:\n{deployment.logs()}"
    assert "gpubench.duckdb" in on_volume
    assert not [name for name in on_volume if name.endswith(".wal")], on_volume
    stage.note(f"volume after stop: {' '.join(sorted(on_volume))}")
    pending_before = deployment.spool()["counts"].get("pending", 0)

    with stage("README block workload-cpu, the collector down"):
        down = deployment.block("workload-cpu", expect=("network", "spool"),
                                exit_code=EXIT_UNREACHABLE)
    lines = down.stderr.splitlines()
    said = first_line(lines, UNREACHED)
    assert said is not None, down.stderr
    training = first_line(lines, TRAINING)
    assert training is not None and said < training, f"not said up front:\n{down.stderr}"
    spool = deployment.spool()
    assert spool["counts"].get("pending", 0) == pending_before + 1, spool

    with stage("collector started again on the same volume"):
        deployment.compose("start", "collector")
        deployment.wait_healthy()
    assert {r["run_id"] for r in deployment.query("runs", "list")} == before

    with stage("README block push (and status)"):
        pushed = deployment.block("push", expect=("network", "spool"))
    after = deployment.query("runs", "list")
    new = [r for r in after if r["run_id"] not in before]
    assert len(new) == 1, f"expected the kept run, got {new}\npush:\n{pushed.stderr}"
    assert new[0]["status"] == "ok" and new[0]["model"] == "B0", new[0]
    assert deployment.spool()["counts"].get("pending", 0) == 0


def test_every_block_the_tests_name_ran(deployment: Deployment) -> None:
    missing = [name for name in RUN_BY_TESTS if name not in deployment.ran]
    assert not missing, f"README blocks not run (an earlier test failed?): {missing}"


def test_an_agent_container_hands_on_its_gpus_and_stops_before_training_without_a_driver(
    images: Images, stage: StageClock, tmp_path: Path
) -> None:
    """The agent container given a device node of NVIDIA's and a driver folder, as
    docker/README.md's gpu-agent-devices block gives them, with a recorded H200 replayed
    through NVML for the GPU it cannot have here: it hands both to the workload
    container it checks, whose CUDA driver is not there, and says so before training."""
    import stat

    node = tmp_path / "nvidia0"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(195, 0))
    except PermissionError:
        pytest.skip("making a device node needs root")
    driver = tmp_path / "driver"
    driver.mkdir()
    trace = REPO / "tests" / "data" / "nvml-h200-trace.json"
    spool = f"gpubench-test-handon-{os.getpid()}"
    command = [
        DOCKER, "run", "--rm", "--network", "host", "--device", f"{node}:/dev/nvidia0",
        "-v", f"{driver}:{driver}:ro", "-e", f"LD_LIBRARY_PATH={driver}",
        "-v", f"{trace}:/trace.json:ro", "-e", "GPUBENCH_NVML_TRACE=/trace.json",
        "-v", "/var/run/docker.sock:/var/run/docker.sock",
        "-v", f"{spool}:/var/lib/gpubench/spool",
        images.agent, "--offline", "--quick",
    ]
    try:
        with stage("agent container: GPUs handed on, no driver: exit 2"):
            done = run(command, timeout=300, check=False)
        listed = run([DOCKER, "run", "--rm", "-v", f"{spool}:/var/lib/gpubench/spool",
                      images.agent, "gpubench-agent", "status", "--json"], timeout=60)
    finally:
        run([DOCKER, "volume", "rm", "-f", spool], timeout=30, check=False)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert ("the workload container gets them through what the agent's own container was "
            "given: 1 device node(s), 2 read-only mount(s)") in " ".join(said.split()), said
    assert "cannot use 1 GPU(s): cannot load libcuda.so.1" in " ".join(said.split()), said
    assert first_line(said.splitlines(), TRAINING) is None, said
    assert json.loads(listed.stdout)["counts"].get("pending", 0) == 0
