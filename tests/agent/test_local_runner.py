"""The local runner with real child processes: events, crashes, OOM, and stopping."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from gpubench.agent.assemble import decide_ending
from gpubench.agent.inventory import ram_bytes
from gpubench.agent.memory_cgroup import MemoryCgroup, this_cgroup, usable_memory
from gpubench.agent.runners.base import WorkloadRequest
from gpubench.agent.runners.local import LocalRunner
from gpubench.v1 import run_pb2

REQUEST = WorkloadRequest(
    "B0", batch=8, settings={"gpus": 0, "epochs": 2, "image_size": 32, "limit_images": 48})


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) is not running.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def run_to_end(command, mode: str, tmp_path: Path, **env: str):
    runner = LocalRunner(command, env={**os.environ, "FAKE_WORKLOAD_MODE": mode, **env},
                         stop_timeouts=(2.0, 2.0))
    with runner.start(REQUEST, log_path=tmp_path / "workload.log") as workload:
        events = list(workload.events())
        outcome = workload.wait()
    return events, outcome


def ending(events, outcome):
    error = next((e for e in events if e.kind == "error"), None)
    result = next((e for e in events if e.kind == "result"), None)
    epochs = {e.epoch for e in events if e.kind == "epoch_finished"}
    return decide_ending(outcome, error, result, 2 in epochs)


def test_arguments_reach_the_workload() -> None:
    assert REQUEST.arguments() == [
        "run", "--model", "B0", "--batch", "8", "--gpus", "0", "--epochs", "2",
        "--image-size", "32", "--limit-images", "48",
    ]
    # The steps rule is the workload's default: left out, so an older image runs it too.
    assert WorkloadRequest("B7").arguments() == ["run", "--model", "B7"]
    assert WorkloadRequest("B7", batch_rule="largest").arguments() == [
        "run", "--model", "B7", "--batch", "largest"]
    switched = WorkloadRequest("B0", settings={"jit_compile": True, "data_on_device": False})
    assert switched.arguments()[-2:] == ["--jit-compile", "--data-on-host"]
    graphs = WorkloadRequest("B0", settings={"cuda_graphs": True})
    assert graphs.arguments()[-1] == "--cuda-graphs"


def test_events_in_order_and_other_output_in_the_log(fake_workload_command, tmp_path) -> None:
    events, outcome = run_to_end(fake_workload_command, "noisy", tmp_path)
    kinds = [e.kind for e in events]
    assert kinds[0] == "started" and kinds[-1] == "result"
    assert kinds.count("epoch_finished") == 2 and "warning" in kinds
    assert outcome.exit_code == 0 and outcome.signal is None and not outcome.interrupted
    log = (tmp_path / "workload.log").read_text()
    assert "a stray line from a framework" in log and "framework banner on stderr" in log
    assert ending(events, outcome).status == run_pb2.RUN_STATUS_OK


def test_a_crash_becomes_an_error_with_the_traceback(fake_workload_command, tmp_path) -> None:
    events, outcome = run_to_end(fake_workload_command, "crash", tmp_path)
    assert outcome.exit_code == 1
    end = ending(events, outcome)
    assert end.status == run_pb2.RUN_STATUS_ERROR
    assert "exited with code 1" in end.message
    assert "RuntimeError: simulated crash in epoch 2" in end.message


def test_an_oom_event_becomes_out_of_memory(fake_workload_command, tmp_path) -> None:
    events, outcome = run_to_end(fake_workload_command, "oom-event", tmp_path)
    end = ending(events, outcome)
    assert end.status == run_pb2.RUN_STATUS_OUT_OF_MEMORY
    assert end.message.startswith("OOM when allocating tensor")


def test_an_oom_exit_code_without_an_event(fake_workload_command, tmp_path) -> None:
    events, outcome = run_to_end(fake_workload_command, "oom-exit", tmp_path)
    end = ending(events, outcome)
    assert end.status == run_pb2.RUN_STATUS_OUT_OF_MEMORY
    assert "ResourceExhaustedError" in end.message


def test_a_child_killed_by_another_is_an_error_not_an_interruption(
        fake_workload_command, tmp_path) -> None:
    counter = tmp_path / "memory.events"
    counter.write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    runner = LocalRunner(fake_workload_command,
                         env={**os.environ, "FAKE_WORKLOAD_MODE": "sigkill"},
                         memory=MemoryCgroup(counter, tmp_path / "memory.max"))
    with runner.start(REQUEST) as workload:
        events = list(workload.events())
        outcome = workload.wait()
    assert outcome.signal == 9 and outcome.exit_code is None
    end = ending(events, outcome)
    assert end.status == run_pb2.RUN_STATUS_ERROR  # only the agent's own stop interrupts
    assert "killed by SIGKILL: not by the agent" in end.message
    assert "out-of-memory killer ended it" not in end.message  # the count did not grow


# A workload the kernel kills for memory: the cgroup counts the kill (here the child bumps
# the count of a file standing for memory.events) just before the SIGKILL lands.
KILLED_FOR_MEMORY = (
    "import os, signal, sys\n"
    "path = sys.argv[1]\n"
    "open(path, 'w').write('oom 1\\noom_kill 4\\n')\n"
    "os.kill(os.getpid(), signal.SIGKILL)\n"
)


def test_a_kill_by_the_kernel_for_memory_is_named_with_what_to_try(tmp_path) -> None:
    counter, limit = tmp_path / "memory.events", tmp_path / "memory.max"
    counter.write_text("oom 1\noom_kill 3\n")
    limit.write_text(f"{8 << 30}\n")
    runner = LocalRunner([sys.executable, "-c", KILLED_FOR_MEMORY, str(counter)],
                         memory=MemoryCgroup(counter, limit))
    with runner.start(REQUEST) as workload:
        events = list(workload.events())
        outcome = workload.wait()
    assert outcome.signal == 9 and not outcome.interrupted
    end = ending(events, outcome)
    said = " ".join(end.message.split())
    assert end.status == run_pb2.RUN_STATUS_ERROR, said
    assert "killed by SIGKILL: the kernel's out-of-memory killer ended it" in said
    host = ram_bytes()
    if host > 8 << 30:
        assert "may use 8.0 GiB of the host's" in said and "(its cgroup's limit)" in said
    assert "Try a smaller run (--image-size 64" in said and "docker run --memory" in said


def test_the_cgroup_is_read_as_v1_or_v2_writes_it(tmp_path) -> None:
    v2 = tmp_path / "v2"
    (v2 / "svc").mkdir(parents=True)
    (v2 / "svc" / "memory.events").write_text("oom 2\noom_kill 2\n")
    (v2 / "svc" / "memory.max").write_text("max\n")
    (tmp_path / "cgroup2").write_text("0::/svc\n")
    found = this_cgroup(tmp_path / "cgroup2", v2)
    assert found.oom_kills() == 2 and found.limit_bytes() is None
    v1 = tmp_path / "v1" / "memory" / "box"
    v1.mkdir(parents=True)
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    (tmp_path / "cgroup1").write_text("5:pids:/\n4:memory:/box\n0::/\n")
    found = this_cgroup(tmp_path / "cgroup1", tmp_path / "v1")
    assert found.oom_kills() == 5 and found.limit_bytes() is None
    (v1 / "memory.limit_in_bytes").write_text(f"{8 << 30}\n")
    assert usable_memory(24 << 30, found) == 8 << 30
    assert usable_memory(4 << 30, found) == 4 << 30


def test_a_missing_program_is_a_clear_error(tmp_path) -> None:
    from gpubench.errors import GpubenchError

    with pytest.raises(GpubenchError, match="cannot start the workload.*no-such-python"):
        LocalRunner(["/no/such/dir/no-such-python"]).start(REQUEST)


@pytest.mark.parametrize("mode, fastest", [
    ("hang", 0.0),            # stops at SIGINT
    ("ignore-sigint", 2.0),   # needs SIGTERM, after the 2 s SIGINT timeout
    ("ignore-all", 4.0),      # needs SIGKILL, after both timeouts
])
def test_stop_escalates_and_leaves_no_process(fake_workload_command, tmp_path, mode,
                                              fastest) -> None:
    pidfile = tmp_path / "pids"
    runner = LocalRunner(
        fake_workload_command,
        env={**os.environ, "FAKE_WORKLOAD_MODE": mode, "FAKE_WORKLOAD_PIDFILE": str(pidfile)},
        stop_timeouts=(2.0, 2.0),
    )
    with runner.start(REQUEST) as workload:
        for event in workload.events():
            if event.kind == "step":
                break
        pids = [int(line) for line in pidfile.read_text().split()]
        assert set(pids) <= workload.pids() and len(pids) == 2  # the child and its own child
        began = time.monotonic()
        workload.stop()
        took = time.monotonic() - began
        outcome = workload.wait()
    assert outcome.interrupted
    assert fastest <= took < fastest + 3.0
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids)
    assert ending([], outcome).status == run_pb2.RUN_STATUS_INTERRUPTED


def test_leaving_early_kills_the_workload(fake_workload_command, tmp_path) -> None:
    pidfile = tmp_path / "pids"
    runner = LocalRunner(fake_workload_command, env={
        **os.environ, "FAKE_WORKLOAD_MODE": "hang", "FAKE_WORKLOAD_PIDFILE": str(pidfile)})
    with runner.start(REQUEST) as workload:
        next(iter(workload.events()))
        pids = [int(line) for line in pidfile.read_text().split()]
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids)
