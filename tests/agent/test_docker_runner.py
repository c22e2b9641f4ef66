"""The docker runner against the host's docker engine (make test-docker).

The stand-in workload runs in the local base image (python3 only) with this folder
mounted, and the shared package's folder for the event stream it writes (gpubench.events
needs nothing else); one test runs the real workload image with tiny settings.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from gpubench.agent.assemble import decide_ending
from gpubench.agent.runners.base import WorkloadRequest
from gpubench.agent.runners.docker import ROLE_LABEL, DockerRunner, DockerUnavailable
from gpubench.v1 import run_pb2

pytestmark = pytest.mark.docker

HERE = Path(__file__).resolve().parent
# The shared package's portion (gpubench/), which the stand-in imports its events from.
SHARED = HERE.parents[1] / "gpubench"
# Moments over one start and stop (or one probe) at which a Ctrl-C arrives.
MOMENTS = 24
REQUEST = WorkloadRequest(
    "B0", batch=8, settings={"gpus": 0, "epochs": 2, "image_size": 32, "limit_images": 48})


@pytest.fixture(scope="module")
def python_image(engine) -> str:
    """An image with python3: $GPUBENCH_TEST_PYTHON_IMAGE, or the local base image."""
    wanted = os.environ.get("GPUBENCH_TEST_PYTHON_IMAGE")
    if wanted:
        return wanted
    for image in engine.images.list(name="gpubench-base"):
        if image.tags:
            return image.tags[0]
    pytest.skip("no image with python3 (docker/base-image.sh makes gpubench-base)")


def stand_in(image: str, mode: str, **options) -> DockerRunner:
    return DockerRunner(image, gpus=False, command=("python3", "/fake/fake_workload.py"),
                        mounts={str(HERE): "/fake", str(SHARED): "/shared/gpubench"},
                        environment={"FAKE_WORKLOAD_MODE": mode, "PYTHONPATH": "/shared"},
                        **options)


def gone(engine, container_id: str) -> bool:
    import docker

    try:
        engine.containers.get(container_id)
    except docker.errors.NotFound:
        return True
    return False


def test_events_stream_and_the_container_is_removed(engine, python_image, tmp_path) -> None:
    with stand_in(python_image, "noisy").start(REQUEST, log_path=tmp_path / "w.log") as workload:
        events = list(workload.events())
        outcome = workload.wait()
        container_id = workload.container_id
    kinds = [e.kind for e in events]
    assert kinds[0] == "started" and kinds[-1] == "result" and "warning" in kinds
    assert outcome.exit_code == 0 and not outcome.interrupted
    assert outcome.image == python_image and outcome.image_digest.startswith("sha256:")
    assert "framework banner on stderr" in (tmp_path / "w.log").read_text()
    assert gone(engine, container_id)


def test_a_crash_in_the_container_is_an_error_result(engine, python_image) -> None:
    with stand_in(python_image, "crash").start(REQUEST) as workload:
        events = list(workload.events())
        outcome = workload.wait()
        container_id = workload.container_id
    result = decide_ending(outcome, None, None, False)
    assert outcome.exit_code == 1 and result.status == run_pb2.RUN_STATUS_ERROR
    assert "simulated crash" in result.message
    assert [e.kind for e in events].count("epoch_finished") == 1
    assert gone(engine, container_id)


def test_stop_interrupts_and_removes_the_container(engine, python_image) -> None:
    runner = stand_in(python_image, "ignore-sigint", stop_timeouts=(2.0, 5.0))
    with runner.start(REQUEST) as workload:
        for event in workload.events():
            if event.kind == "step":
                break
        assert workload.pids()  # host pids of the container's processes
        began = time.monotonic()
        workload.stop()
        took = time.monotonic() - began
        outcome = workload.wait()
        container_id = workload.container_id
    assert outcome.interrupted and 2.0 <= took < 10.0  # SIGINT ignored, SIGTERM worked
    assert decide_ending(outcome, None, None, False).status == run_pb2.RUN_STATUS_INTERRUPTED
    assert gone(engine, container_id)


def prober(image: str, **environment: str) -> DockerRunner:
    """A runner whose probe is the stand-in's: the answer recorded on an H200
    (tests/data, mounted beside /fake) unless FAKE_WORKLOAD_PROBE names another file."""
    return DockerRunner(image, gpus=False, command=("python3", "/fake/fake_workload.py"),
                        mounts={str(HERE): "/fake", str(HERE.parent / "data"): "/data",
                                str(SHARED): "/shared/gpubench"},
                        environment={"FAKE_WORKLOAD_MODE": "ok", "PYTHONPATH": "/shared",
                                     **environment})


def our_containers(engine) -> set[str]:
    """Ids of every container a runner made (workload or probe), running or not."""
    found = engine.containers.list(all=True, filters={"label": ROLE_LABEL})
    return {container.id for container in found}


def start_and_stop(image: str) -> None:
    with stand_in(image, "ok").start(REQUEST) as workload:
        workload.stop()


@pytest.mark.parametrize("step", ["start", "probe"])
def test_a_ctrl_c_at_any_moment_leaves_no_container(engine, python_image, step) -> None:
    """A real SIGINT at moments spread over one start and stop (or one probe), the
    engine's create and remove requests included: the engine goes on making the
    container after a Ctrl-C has ended the wait for its answer, and none may be left
    once all have ended."""
    if step == "start":
        def action() -> None:
            start_and_stop(python_image)
    else:
        def action() -> None:
            prober(python_image).probe_output()

    def interrupted_at(delay_s: float) -> None:
        ctrl_c = threading.Timer(delay_s, signal.pthread_kill,
                                 (threading.main_thread().ident, signal.SIGINT))
        try:
            ctrl_c.start()
            action()
            ctrl_c.join()  # a Ctrl-C too late for the action lands here
        except KeyboardInterrupt:
            pass

    before = our_containers(engine)
    began = time.monotonic()
    action()
    took_s = time.monotonic() - began
    for moment in range(MOMENTS):
        interrupted_at(took_s * moment / MOMENTS)
    time.sleep(1.0)  # a container the engine made late would be there by now
    assert our_containers(engine) == before


def test_the_probe_container_answers_for_the_image(engine, python_image) -> None:
    from gpubench.agent import compat

    output = prober(python_image).probe_output()
    assert compat.parse_probe_output(output)  # the stand-in's builds, read from its answer
    assert compat.driver_from_probe(output) is None  # no GPU asked for: no driver check


def test_a_failed_probe_is_one_clear_error_and_leaves_no_container(
        engine, python_image) -> None:
    before = our_containers(engine)
    runner = prober(python_image, FAKE_WORKLOAD_PROBE="/data/no-such-probe.json")
    with pytest.raises(DockerUnavailable, match=r"the probe in the image \S+ exited with 1: "
                                                r"(?s:.*)no-such-probe\.json"):
        runner.probe_output()
    assert our_containers(engine) == before


def test_a_missing_image_is_one_clear_error(engine) -> None:
    with pytest.raises(DockerUnavailable, match="no-such-image:0: not on this host"):
        DockerRunner("no-such-image:0", gpus=False).start(REQUEST)


@pytest.mark.slow
@pytest.mark.parametrize(("image", "backend"), [
    (os.environ.get("GPUBENCH_WORKLOAD_IMAGE", "gpubench-workload:latest"), "torch"),
    ("gpubench-workload:tensorflow", "tensorflow"),
], ids=["torch", "tensorflow"])
def test_the_real_workload_image(engine, tmp_path, image: str, backend: str) -> None:
    import docker

    try:
        engine.images.get(image)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{image} is not built (docker/build.sh)")
    with DockerRunner(image, gpus=False).start(REQUEST, log_path=tmp_path / "w.log") as workload:
        events = list(workload.events())
        outcome = workload.wait()
        container_id = workload.container_id
    result = next(e for e in events if e.kind == "result")
    epochs = {e.epoch for e in events if e.kind == "epoch_finished"}
    assert decide_ending(outcome, None, result, 2 in epochs).status == run_pb2.RUN_STATUS_OK
    started = next(e for e in events if e.kind == "started")
    assert started.model == "B0" and started.image_size == 32
    assert started.backend == backend  # the image's one framework
    assert gone(engine, container_id)


@pytest.mark.parametrize(("way", "said"), [
    ("auto", "no NVIDIA device nodes under /dev"),
    ("toolkit", 'could not select device driver "" with capabilities: [[gpu]]'),
    ("cdi", "no CDI spec of nvidia.com/gpu"),
])
def test_no_way_to_the_gpus_is_exit_2_before_training(engine, tmp_path, way: str,
                                                      said: str) -> None:
    """The agent on this host, told by a recorded H200 (replayed through NVML) that it
    has a GPU, with no toolkit, no CDI spec and no device nodes: one message that says
    what is missing and what to install, exit 2, nothing trained or spooled."""
    import subprocess
    import sys

    if Path("/dev/nvidiactl").exists() or "nvidia" in str(engine.info().get("Runtimes")):
        pytest.skip("this host can give containers a GPU")
    trace = HERE.parent / "data" / "nvml-h200-trace.json"
    done = subprocess.run(
        [sys.executable, "-m", "gpubench.agent.cli", "run", "--quick", "--offline",
         "--runner", "docker", "--gpu-access", way, "--spool", str(tmp_path / "spool")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "GPUBENCH_NVML_TRACE": str(trace)})
    message = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr
    assert said in message and "NVIDIA Container Toolkit" in message, message
    assert "B0 epoch" not in message
    assert not list((tmp_path / "spool").rglob("*.json"))


def test_the_cache_volume_outlives_each_container(engine, python_image) -> None:
    # What one workload container keeps in its cache (the photos it generated, JAX's
    # compiled programs), the next one finds: the engine's named volume, not the
    # container's own file system.
    name = f"kept-{os.getpid()}-{time.monotonic_ns()}"
    scripts = (f'echo {name} > "$GPUBENCH_CACHE/{name}"',
               f'test "$(cat "$GPUBENCH_CACHE/{name}")" = {name} && rm "$GPUBENCH_CACHE/{name}"')
    for script in scripts:
        runner = DockerRunner(python_image, gpus=False, command=("sh", "-c", script))
        with runner.start(REQUEST) as workload:
            list(workload.events())
            assert workload.wait().exit_code == 0, script
