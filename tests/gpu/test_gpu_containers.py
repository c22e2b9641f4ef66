"""On a GPU host with a docker engine and the images built (bench/h200_docker.sh runs
this on an H200 without the NVIDIA Container Toolkit): the agent container trains on the
GPU through docker/README.md's command for such a host, as written.

- `--quick` through the agent container and the workload container it starts: the
  record's GPU, telemetry and image digest, sent to a collector container;
- `docker stop` of the agent mid-epoch (B7's epoch 2): exit 130, no workload container
  left;
- a way to the GPUs the engine does not have (`--gpu-access toolkit` where there is no
  toolkit): one clear message and exit 2, before any training.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "docker"))
from readme_blocks import Names, blocks, localise  # noqa: E402

DOCKER = shutil.which("docker") or "docker"
AGENT = os.environ.get("GPUBENCH_AGENT_IMAGE", "gpubench-agent:latest")
WORKLOAD = os.environ.get("GPUBENCH_WORKLOAD_IMAGE", "gpubench-workload:latest")
COLLECTOR = os.environ.get("GPUBENCH_COLLECTOR_IMAGE", "gpubench-collector:latest")
WORKLOAD_LABEL = "org.gpubench.role=workload"
EXIT_USAGE, EXIT_INTERRUPTED = 2, 130


def _has(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.docker,
    pytest.mark.skipif(not _has(["nvidia-smi", "-L"]), reason="no NVIDIA GPU on this host"),
    pytest.mark.skipif(not _has([DOCKER, "image", "inspect", AGENT, WORKLOAD, COLLECTOR]),
                       reason="no docker engine with the images (bench/h200_docker.sh setup)"),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def docker(*args: str, timeout: float = 120, check: bool = True) -> str:
    done = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)
    assert not check or done.returncode == 0, f"docker {' '.join(args)}: {done.stderr}"
    return done.stdout


def workload_containers() -> set[str]:
    return set(docker("ps", "-aq", "--no-trunc", "--filter", f"label={WORKLOAD_LABEL}").split())


class Collector:
    """A collector container on the host's network, on a port of its own."""

    def __init__(self) -> None:
        self.port = free_port()
        self.name = f"gpubench-test-collector-{self.port}"
        docker("run", "-d", "--name", self.name, "--network", "host", COLLECTOR, "serve",
               "--host", "127.0.0.1", "--port", str(self.port), "--insecure")
        env = ["-e", f"GPUBENCH_HEALTH_ADDRESS=127.0.0.1:{self.port}"]
        docker("exec", *env, self.name, "gpubench-healthcheck", "--wait", "60")
        self.token = docker("exec", self.name, "gpubench-collector", "token", "create",
                            "gpu-test").strip()

    def runs(self) -> list[dict]:
        out = docker("exec", self.name, "gpubench", "--collector", f"127.0.0.1:{self.port}",
                     "--token", self.token, "runs", "list", "--format", "json")
        return json.loads(out)

    def remove(self) -> None:
        docker("rm", "-f", "-v", self.name, check=False)


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    found = Collector()
    try:
        yield found
    finally:
        found.remove()


def readme_agent(collector: Collector, spool: str, *extra: str) -> str:
    """docker/README.md's gpu-agent-devices block, with this test's port and spool volume
    and `extra` flags after its own."""
    names = Names(network="host", spool_volume=spool, port=collector.port, compose_v2=True)
    script = localise("gpu-agent-devices", blocks()["gpu-agent-devices"], names,
                      expect=("spool", "port")).rstrip("\n")
    return f"{script} {' '.join(extra)}"


def start(script: str, token: str) -> tuple[subprocess.Popen[str], queue.Queue[str | None]]:
    process = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=REPO,
                               text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env={**os.environ, "TOKEN": token, "GPUBENCH_TOKEN": token},
                               start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return process, lines


def read_until(lines: queue.Queue[str | None], pattern: str, within_s: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
        if re.search(pattern, line):
            return seen
    raise AssertionError(f"no line matching {pattern!r}:\n" + "\n".join(seen[-60:]))


def finish(process: subprocess.Popen[str], lines: queue.Queue[str | None],
           within_s: float) -> str:
    """Everything the process printed until it ended (killed after `within_s`)."""
    try:
        process.wait(timeout=within_s)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    seen = []
    while (line := lines.get(timeout=30)) is not None:
        seen.append(line)
    return "\n".join(seen)


def test_the_agent_container_trains_on_the_gpu(collector: Collector) -> None:
    before = {run["run_id"] for run in collector.runs()}
    spool = f"gpubench-test-spool-{collector.port}"
    process, lines = start(readme_agent(collector, spool, "--quick", "--label",
                                        "'gpu test'"), collector.token)
    try:
        said = finish(process, lines, 900)
    finally:
        docker("volume", "rm", "-f", spool, check=False)
    assert process.returncode == 0, said[-4000:]
    assert "GPUs: the workload container gets them through what the agent's own " \
           "container was given" in " ".join(said.split()), said[-4000:]
    new = [run for run in collector.runs() if run["run_id"] not in before]
    assert len(new) == 1, new
    stored = new[0]
    assert stored["status"] == "ok" and stored["model"] == "B0", stored
    assert stored["gpu_config"] != "CPU" and stored["gpu_count"] == 1, stored
    assert stored["backend"] == "torch", stored
    assert stored["container_image"] == WORKLOAD, stored
    image_id = docker("image", "inspect", "--format", "{{.Id}}", WORKLOAD).strip()
    assert stored["container_image_digest"] == image_id, stored
    # NVML read in the agent's container: the epoch's energy and power, the clocks.
    assert float(stored["energy_per_epoch_j"]) > 0, stored
    assert float(stored["mean_power_w"]) > 0, stored
    assert workload_containers() == set()


def test_docker_stop_mid_epoch_leaves_no_workload_container(collector: Collector) -> None:
    spool = f"gpubench-test-spool-stop-{collector.port}"
    # B7 at batch 16: its epoch 2 trains for about 20 s on an H200, so a stop two
    # seconds after epoch 1's figure lands mid-epoch.
    process, lines = start(readme_agent(collector, spool, "--models", "B7", "--batch", "16",
                                        "--idle-timeout", "5"), collector.token)
    try:
        seen = read_until(lines, r"^B7 epoch 1: ", 600)
        time.sleep(2)
        agents = docker("ps", "-q", "--filter", f"ancestor={AGENT}").split()
        assert len(agents) == 1, agents
        docker("stop", "-t", "60", agents[0], timeout=90)
        rest = finish(process, lines, 120)
    finally:
        docker("volume", "rm", "-f", spool, check=False)
    assert process.returncode == EXIT_INTERRUPTED, "\n".join(seen) + rest
    deadline = time.monotonic() + 30
    while workload_containers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert workload_containers() == set()


def test_a_way_to_the_gpus_the_engine_lacks_is_exit_2_before_training(tmp_path: Path) -> None:
    if "nvidia" in docker("info", "--format", "{{json .Runtimes}}"):
        pytest.skip("this engine has the NVIDIA Container Toolkit")
    done = subprocess.run(
        [sys.executable, "-m", "gpubench.agent.cli", "run", "--quick", "--offline",
         "--runner", "docker", "--image", WORKLOAD, "--gpu-access", "toolkit",
         "--spool", str(tmp_path / "spool")],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == EXIT_USAGE, done.stderr[-3000:]
    assert "NVIDIA Container Toolkit" in done.stderr, done.stderr[-3000:]
    assert "B0 epoch" not in done.stderr  # said before any training
    assert not list((tmp_path / "spool").rglob("*.json"))
