"""`gpubench-agent` as a person runs it: real processes, a real collector on port 0, the
stand-in workload (or the real one, in the end-to-end test) and the recorded NVML trace
in place of a GPU."""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from terminal import popen_with_ctrl_c
from waiting import STOP_DEADLINE_S, until

from gpubench import record
from gpubench.client import Client

AGENT = [sys.executable, "-m", "gpubench.agent.cli"]
HEAVY = ("tensorflow", "keras", "torch", "jax")


def agent_env(tmp_path: Path, fake_workload_command: list[str] | None, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUBENCH_") or k == "GPUBENCH_STATE"}
    env["GPUBENCH_SPOOL"] = str(tmp_path / "spool")
    env["COLUMNS"] = "200"  # rich: one line per message, whatever the test's terminal
    if fake_workload_command:
        env["GPUBENCH_WORKLOAD_COMMAND"] = shlex.join(fake_workload_command)
    env.update(extra)
    return env


def with_token(env: dict, token: str) -> dict:
    """`env` with the access token where the agent takes it (never argv)."""
    return {**env, "GPUBENCH_TOKEN": token}


def agent(args: list[str], env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*AGENT, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_help_loads_nothing_heavy() -> None:
    probe = (
        "import sys\n"
        "from gpubench.agent.cli import main\n"
        "for args in (['--help'], ['run', '--help'], ['push', '--help']):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit as stop:\n"
        "        assert stop.code == 0, stop.code\n"
        "heavy = ('tensorflow', 'keras', 'torch', 'jax', 'pandas', 'grpc', 'numpy')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert "--sample-hz" in done.stdout and "--offline" in done.stdout


def test_run_needs_a_collector_or_offline(tmp_path, fake_workload_command) -> None:
    done = agent(["run", "--models", "B0"], agent_env(tmp_path, fake_workload_command))
    assert done.returncode == 2 and "--offline" in done.stderr


def test_run_sends_a_complete_record(tmp_path, fake_workload_command, collector,
                                     trace_path) -> None:
    env = agent_env(tmp_path, fake_workload_command, GPUBENCH_NVML_TRACE=str(trace_path),
                    FAKE_WORKLOAD_EPOCH_SECONDS="0.5")
    token = collector.make_token("lab")
    done = agent(["run", "--models", "B0", "--batch", "8", "--collector", collector.address,
                  "--trace", str(tmp_path / "samples.jsonl"),
                  "--label", "test rig"], with_token(env, token))
    assert done.returncode == 0, done.stderr
    assert "replaying the NVML trace" in done.stderr
    assert "sent to the collector" in done.stderr
    assert "gpubench on 1x NVIDIA H200" in done.stderr  # the summary table
    # The collector holds no other run like it: said plainly, never compared with itself.
    assert "B0: nothing to compare with yet" in done.stderr and "(baseline)" not in done.stderr
    with Client(collector.address, collector.admin_token) as client:
        [stored] = list(client.iter_runs())
    run = stored.run
    assert stored.submitter == "lab" and run.label == "test rig"
    assert run.result.status == record.RunStatus.RUN_STATUS_OK
    assert run.gpus[0].name == "NVIDIA H200" and run.config.batch_per_gpu == 8
    assert run.result.epoch2_seconds == pytest.approx(0.5, abs=0.3)
    measured = {e.number: e for e in run.result.epochs}[2]
    assert measured.energy_source == "counter" and measured.samples >= 3
    # The figures come from the recorded trace: the mean power lies within what it recorded.
    powers = [s["power_watts"] for s in json.loads(trace_path.read_text())["samples"]]
    assert min(powers) <= run.result.mean_power_watts <= max(powers)
    assert run.result.energy_per_epoch_joules == pytest.approx(
        run.result.mean_power_watts * measured.wall_seconds, rel=0.01)
    [memory] = run.result.memory
    assert memory.allocator_peak_bytes > 0 and memory.device_peak_bytes > 0
    assert memory.process_peak_bytes > 0  # the recorded workload's memory, mapped to the child
    assert run.result.idle_wait_seconds > 0 and run.result.idle_temperature_c > 0
    lines = (tmp_path / "samples.jsonl").read_text().splitlines()
    assert len(lines) >= 5 and json.loads(lines[0])["run_id"] == run.run_id
    assert [e.name for e in (tmp_path / "spool" / "sent").iterdir()] == [f"{run.run_id}.json"]


def test_json_prints_the_records(tmp_path, fake_workload_command) -> None:
    env = agent_env(tmp_path, fake_workload_command)
    done = agent(["run", "--models", "B0,B3", "--offline", "--json"], env)
    assert done.returncode == 0, done.stderr
    runs = [record.from_dict(data) for data in json.loads(done.stdout)]
    assert [r.config.model for r in runs] == ["B0", "B3"]
    assert {r.config.gpu_count for r in runs} == {0}  # no GPU here: CPU-only
    assert "no NVIDIA driver found" in done.stderr
    assert len(list((tmp_path / "spool" / "pending").iterdir())) == 2


def test_failed_run_exits_1_and_is_still_recorded(tmp_path, fake_workload_command) -> None:
    env = agent_env(tmp_path, fake_workload_command, FAKE_WORKLOAD_MODE="oom-event")
    done = agent(["run", "--models", "B7", "--batch", "64", "--offline", "--json"], env)
    assert done.returncode == 1
    [data] = json.loads(done.stdout)
    assert data["result"]["status"] == "RUN_STATUS_OUT_OF_MEMORY"
    assert "OOM when allocating" in data["result"]["error_message"]


def test_unreachable_collector_exits_3_then_push_sends(tmp_path, fake_workload_command,
                                                        collector) -> None:
    env = agent_env(tmp_path, fake_workload_command)
    done = agent(["run", "--models", "B0", "--collector", "127.0.0.1:9"], with_token(env, "t"),
                 timeout=300)
    assert done.returncode == 3, done.stderr
    # Said before the benchmark, with the folder the run waits in; then it runs.
    before, _, after = done.stderr.partition("B0: ok")
    assert "cannot reach the collector" in before
    assert f"The runs will wait in {tmp_path / 'spool'}" in before
    # Not pushed again after the run: the check found the collector down, and the run
    # waits in the spool as it said, with no retries before the exit.
    assert "push:" not in after and "trying again" not in done.stderr
    status = json.loads(agent(["status", "--json"], env).stdout)
    assert status["counts"]["pending"] == 1
    [row] = status["runs"]
    assert row["model"] == "B0" and row["status"] == "ok"
    token = collector.make_token("lab")
    pushed = agent(["push", "--collector", collector.address], with_token(env, token))
    assert pushed.returncode == 0, pushed.stderr
    assert "sent 1 run(s); 0 pending" in pushed.stderr
    assert json.loads(agent(["status", "--json"], env).stdout)["counts"]["sent"] == 1
    with Client(collector.address, collector.admin_token) as client:
        assert client.get_run(row["file"].removesuffix(".json")).submitter == "lab"


@pytest.mark.parametrize("how", ["wrong", "revoked", "none"])
def test_a_refused_token_stops_the_run_before_any_training(tmp_path, fake_workload_command,
                                                           collector, how: str) -> None:
    env = agent_env(tmp_path, fake_workload_command)
    token = {"wrong": "gpb_not-a-token", "none": None}.get(how)
    if how == "revoked":
        token = collector.make_token("gone")
        with Client(collector.address, collector.admin_token) as client:
            client.revoke_token("gone")
    args = ["run", "--models", "B0,B3,B7", "--collector", collector.address]
    began = time.monotonic()
    done = agent(args, with_token(env, token) if token else env)
    assert done.returncode == 4, done.stderr
    assert time.monotonic() - began < 30
    refused = ("needs a token for checking access and none was given" if how == "none"
               else "did not accept the token")
    assert refused in done.stderr and "Nothing was run" in done.stderr
    assert "B0:" not in done.stderr  # no model started
    assert not (tmp_path / "spool" / "pending").exists() or not any(
        (tmp_path / "spool" / "pending").iterdir())


def test_an_accepted_token_is_said_before_the_run(tmp_path, fake_workload_command,
                                                  collector) -> None:
    env = agent_env(tmp_path, fake_workload_command)
    done = agent(["run", "--models", "B0", "--batch", "8", "--collector", collector.address],
                 with_token(env, collector.make_token("lab")))
    assert done.returncode == 0, done.stderr
    first = done.stderr.index(f"collector {collector.address}: token 'lab' may submit runs")
    assert first < done.stderr.index("B0: ok")


def test_offline_wins_over_an_exported_collector(tmp_path, fake_workload_command) -> None:
    env = agent_env(tmp_path, fake_workload_command, GPUBENCH_COLLECTOR="127.0.0.1:9")
    done = agent(["run", "--models", "B0", "--batch", "8", "--offline"], env)
    assert done.returncode == 0, done.stderr
    given = agent(["run", "--models", "B0", "--offline", "--collector", "127.0.0.1:9"], env)
    assert given.returncode == 2 and "choose one" in given.stderr


def test_escape_codes_stay_out_of_the_record_and_the_console(tmp_path,
                                                            fake_workload_command) -> None:
    env = agent_env(tmp_path, fake_workload_command, FAKE_WORKLOAD_MODE="error-escapes")
    done = agent(["run", "--models", "B0", "--batch", "8", "--offline", "--json"], env)
    assert done.returncode == 1, done.stderr
    [data] = json.loads(done.stdout)
    message = data["result"]["error_message"]
    assert message == "ValueError: Exception encountered when calling Pad.call()."
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    assert "ValueError: Exception encountered when calling Pad.call()." in done.stderr


def test_quick_runs_b0_at_the_articles_t4_batch(tmp_path, fake_workload_command) -> None:
    env = agent_env(tmp_path, fake_workload_command)
    done = agent(["run", "--quick", "--offline", "--json"], env)
    assert done.returncode == 0, done.stderr
    [data] = json.loads(done.stdout)
    config = data["config"]
    assert (config["model"], config["batch_per_gpu"], config["batch_rule"]) == ("B0", 128, "quick")
    assert config["batch_choice"] == "BATCH_CHOICE_GIVEN" and "batch_trials" not in data["result"]
    for clash in (["--models", "B3"], ["--batch", "64"], ["--precision", "mixed_bfloat16"]):
        refused = agent(["run", "--quick", "--offline", *clash], env)
        assert refused.returncode == 2 and "--quick sets" in refused.stderr, clash


def test_quick_on_the_cpu_warns_that_it_is_long(tmp_path, fake_workload_command,
                                                trace_path) -> None:
    cpu = agent(["run", "--quick", "--offline"],
                agent_env(tmp_path, fake_workload_command, CUDA_VISIBLE_DEVICES=""))
    assert cpu.returncode == 0, cpu.stderr
    assert "warning: --quick on the CPU trains B0 at full size (224 px, batch 128): many " \
           "minutes here" in cpu.stderr
    assert "The time left shows once its first training steps are timed" in cpu.stderr
    gpu = agent(["run", "--quick", "--offline"],
                agent_env(tmp_path, fake_workload_command, GPUBENCH_NVML_TRACE=str(trace_path)))
    assert gpu.returncode == 0, gpu.stderr
    assert "--quick on the CPU" not in gpu.stderr


def test_a_searched_batch_records_its_rule_and_the_largest(tmp_path,
                                                           fake_workload_command) -> None:
    env = agent_env(tmp_path, fake_workload_command)
    for flag, rule in (("auto", "steps"), ("largest", "largest")):
        done = agent(["run", "--models", "B0", "--batch", flag, "--offline", "--json"], env)
        assert done.returncode == 0, done.stderr
        [data] = json.loads(done.stdout)
        assert data["config"]["batch_rule"] == rule
        assert data["config"]["batch_choice"] == "BATCH_CHOICE_SEARCHED"


def test_the_workloads_memory_notes_reach_the_record(tmp_path, fake_workload_command) -> None:
    env = agent_env(tmp_path, fake_workload_command, FAKE_WORKLOAD_MODE="noisy")
    done = agent(["run", "--models", "B0", "--batch", "8", "--offline", "--json"], env)
    assert done.returncode == 0, done.stderr
    [data] = json.loads(done.stdout)
    assert data["result"]["memory_notes"] == [
        "CUDA graphs: the allocator peak covers the whole run"]


def test_a_workload_of_another_stream_version_is_refused(tmp_path, fake_workload_command) -> None:
    env = agent_env(tmp_path, fake_workload_command, FAKE_WORKLOAD_MODE="old-stream")
    done = agent(["run", "--models", "B0", "--batch", "8", "--offline"], env)
    assert done.returncode != 0
    assert "event stream is version 1, and this side reads version 2" in done.stderr
    assert "Traceback" not in done.stderr


def test_largest_batch_json_has_its_declared_shape(tmp_path, fake_workload_command,
                                                   trace_path) -> None:
    from gpubench.agent.largest import Found, FoundTrial

    env = agent_env(tmp_path, fake_workload_command, GPUBENCH_NVML_TRACE=str(trace_path))
    done = agent(["largest-batch", "--models", "B0", "--memory-limit", "8GiB,16GiB", "--json"],
                 env)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [row["memory_limit_bytes"] for row in rows] == [8 << 30, 16 << 30]
    for row in rows:
        assert list(row) == [f.name for f in dataclasses.fields(Found)]
        assert (row["model"], row["largest"], row["batch"], row["rule"]) == ("B0", 16, 16, "steps")
        assert [list(trial) for trial in row["trials"]] == [
            [f.name for f in dataclasses.fields(FoundTrial)]] * 2
        assert [(t["batch"], t["fits"], t["kind"]) for t in row["trials"]] == [
            (32, False, "probe"), (16, True, "confirm")]


def test_a_run_the_collector_refuses_is_moved_aside(tmp_path, fake_workload_command,
                                                    collector) -> None:
    env = agent_env(tmp_path, fake_workload_command)
    done = agent(["run", "--models", "B0", "--batch", "8", "--label", "x" * 300,
                  "--collector", collector.address], with_token(env, collector.make_token("lab")))
    assert done.returncode == 1
    assert "run.label: longer than 200 characters" in done.stderr
    [refused] = [p for p in (tmp_path / "spool" / "refused").iterdir() if p.suffix == ".json"]
    assert "run.label" in Path(f"{refused}.reason").read_text()


def test_push_with_a_wrong_token_exits_4(tmp_path, collector, make_run) -> None:
    from gpubench.agent.spool import Spool

    Spool(tmp_path / "spool").write(make_run())
    done = agent(["push", "--collector", collector.address],
                 with_token(agent_env(tmp_path, None), "wrong"))
    assert done.returncode == 4
    assert len(list((tmp_path / "spool" / "pending").iterdir())) == 1


def test_push_takes_the_token_from_a_file_or_stdin_not_argv(tmp_path, collector,
                                                            make_run) -> None:
    from gpubench.agent.spool import Spool

    token = collector.make_token("lab")
    secret_file = tmp_path / "token"
    secret_file.write_text(token + "\n")
    env = agent_env(tmp_path, None)
    Spool(tmp_path / "spool").write(make_run())
    done = agent(["push", "--collector", collector.address, "--token-file", str(secret_file)],
                 env)
    assert done.returncode == 0, done.stderr
    assert "sent 1 run(s); 0 pending" in done.stderr
    Spool(tmp_path / "spool").write(make_run())
    done = subprocess.run([*AGENT, "push", "--collector", collector.address, "--token-file", "-"],
                          input=token + "\n", env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert collector.store.runs.count() == 2
    # From the environment, as from the file.
    Spool(tmp_path / "spool").write(make_run())
    done = agent(["push", "--collector", collector.address], with_token(env, token))
    assert done.returncode == 0, done.stderr
    assert collector.store.runs.count() == 3
    empty = tmp_path / "empty"
    empty.write_text("\n")
    none = agent(["push", "--collector", collector.address, "--token-file", str(empty)], env)
    assert none.returncode == 2 and "holds no token" in none.stderr


@pytest.mark.parametrize("command", [["push"], ["run", "--models", "B0"]])
def test_a_token_in_argv_is_refused_with_what_to_use_instead(tmp_path, collector, make_run,
                                                            command) -> None:
    """Every user of the machine reads argv (`ps`): --token is refused before anything
    runs or is sent, whatever else gives a token."""
    from gpubench.agent.spool import Spool

    token = collector.make_token("lab")
    secret_file = tmp_path / "token"
    secret_file.write_text(token + "\n")
    Spool(tmp_path / "spool").write(make_run())
    env = agent_env(tmp_path, None)
    for extra in ([], ["--token-file", str(secret_file)]):
        done = agent([*command, "--collector", collector.address, "--token", token, *extra],
                     env)
        assert done.returncode == 2, done.stderr
        said = " ".join(done.stderr.split())
        assert "--token puts the secret in the process list" in said
        assert "use --token-file FILE ('-': stdin), or set GPUBENCH_TOKEN" in said
    assert collector.store.runs.count() == 0
    assert "--token " not in agent(["push", "--help"], env).stdout


def _lines(stream) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _agent_as_in_a_terminal(*args: str, env: dict[str, str]) -> subprocess.Popen:
    """The agent with SIGINT at its default, as in a terminal (popen_with_ctrl_c)."""
    return popen_with_ctrl_c([*AGENT, *args], env=env, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_the_workload_and_records_the_run(tmp_path, fake_workload_command,
                                                        stop) -> None:
    pidfile = tmp_path / "pids"
    env = agent_env(tmp_path, fake_workload_command, FAKE_WORKLOAD_MODE="hang",
                    FAKE_WORKLOAD_PIDFILE=str(pidfile))
    process = _agent_as_in_a_terminal("run", "--models", "B0,B3", "--batch", "8",
                                      "--offline", env=env)
    lines = _lines(process.stderr)
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = lines.get(timeout=60)
        assert line is not None, "".join(seen)
        seen.append(line)
        if line.startswith("B0: tensorflow"):
            break
    time.sleep(0.3)
    process.send_signal(stop)  # what the terminal sends on Ctrl-C; what `kill` sends
    assert process.wait(timeout=STOP_DEADLINE_S) == 130
    pids = [int(p) for p in pidfile.read_text().split()]

    def ended(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
        except OSError:
            return True

    assert until(lambda: all(ended(pid) for pid in pids)), pids
    [pending] = list((tmp_path / "spool" / "unfinished").iterdir())
    run = record.from_json(pending.read_text())
    assert run.config.model == "B0"  # B3 was never started
    assert run.result.status == record.RunStatus.RUN_STATUS_INTERRUPTED


def test_ctrl_c_ends_the_agent_at_once_and_pushes_nothing(tmp_path, fake_workload_command,
                                                         collector) -> None:
    """A workload that does not heed SIGINT (a framework deep in a kernel) is stopped
    with SIGTERM half a second later; the interrupted run stays in the spool, unsent.
    Before, the agent waited 10 s for the workload, then pushed the run."""
    env = agent_env(tmp_path, fake_workload_command, FAKE_WORKLOAD_MODE="ignore-sigint")
    process = _agent_as_in_a_terminal("run", "--models", "B0,B3", "--batch", "8",
                                      "--collector", collector.address,
                                      env=with_token(env, collector.make_token("lab")))
    lines = _lines(process.stderr)
    seen = []
    while not seen or not seen[-1].startswith("B0: tensorflow"):
        line = lines.get(timeout=60)
        assert line is not None, "".join(seen)
        seen.append(line)
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 130
    # The old code's SIGINT wait alone was 10 s; this one's whole stop is about a second.
    assert time.monotonic() - sent < 9
    while (line := lines.get(timeout=60)) is not None:
        seen.append(line)
    said = "".join(seen)
    assert "push:" not in said and "sent to the collector" not in said, said
    [pending] = list((tmp_path / "spool" / "unfinished").iterdir())
    assert record.from_json(pending.read_text()).result.status == \
        record.RunStatus.RUN_STATUS_INTERRUPTED
    with Client(collector.address, collector.admin_token) as client:
        assert client.list_runs().empty
    # A later push leaves it too, and says how to send it; asked, it sends it.
    lab = with_token(env, collector.make_token("lab-push"))
    pushed = agent(["push", "--collector", collector.address], lab)
    said = " ".join(pushed.stderr.split())
    assert pushed.returncode == 0 and "sent 0 run(s); 0 pending" in said, said
    assert "1 run(s) that did not finish" in said and "--include-failed sends them" in said
    with Client(collector.address, collector.admin_token) as client:
        assert client.list_runs().empty
    pushed = agent(["push", "--collector", collector.address, "--include-failed"], lab)
    assert pushed.returncode == 0 and "sent 1 run(s)" in pushed.stderr, pushed.stderr


def test_largest_batch_says_each_error_once_and_no_empty_table(tmp_path,
                                                               fake_workload_command) -> None:
    env = agent_env(tmp_path, fake_workload_command, FAKE_WORKLOAD_MODE="oom-event")
    done = agent(["largest-batch", "--models", "B0,B3"], env)
    assert done.returncode == 1
    for model in ("B0", "B3"):
        said = [line for line in done.stderr.splitlines() if line.startswith(f"{model}:")
                and "OOM when allocating" in line]
        assert len(said) == 1, done.stderr
        assert said[0].startswith(f"{model}: the search failed: ")
    assert "Largest batch" not in done.stdout and not done.stdout.strip()
    assert "\n\n" not in done.stderr  # no empty line where live rows ended


def test_inventory(tmp_path, trace_path) -> None:
    plain = agent(["inventory", "--json"], agent_env(tmp_path, None))
    assert plain.returncode == 0
    data = json.loads(plain.stdout)
    assert data["host"]["cpu_cores"] == os.cpu_count()
    if not data["gpus"]:
        assert data["cpu_only"] and data["no_gpu_reason"].startswith("no NVIDIA driver found")
    replayed = agent(["inventory"], agent_env(tmp_path, None, GPUBENCH_NVML_TRACE=str(trace_path)))
    assert replayed.returncode == 0 and "NVIDIA H200" in replayed.stdout


def test_models_asks_the_workload(tmp_path, fake_workload_command) -> None:
    done = agent(["models", "--json"], agent_env(tmp_path, fake_workload_command))
    assert done.returncode == 0
    assert json.loads(done.stdout)["B7"] == 64105370
    assert done.stderr == ""  # not the framework's start-up log


def test_models_shows_the_workloads_output_when_it_fails(tmp_path,
                                                         fake_workload_command) -> None:
    done = agent(["models"], agent_env(tmp_path, fake_workload_command,
                                       FAKE_WORKLOAD_MODE="crash"))
    assert done.returncode == 1
    assert "cpu_feature_guard" in done.stderr  # the whole story, this time
    last = done.stderr.splitlines()[-1]  # one line: COLUMNS=200
    assert last.startswith("gpubench-agent: the workload (") and "exited with code 1" in last
    assert "No module named 'keras'" in last


@pytest.mark.slow
def test_end_to_end_with_the_real_workload(tmp_path, collector) -> None:
    """The real workload (Keras on the CPU, tiny settings) through to the collector."""
    env = agent_env(tmp_path, None)
    token = collector.make_token("ci")
    done = agent(["run", "--models", "B0", "--image-size", "32", "--train-images", "39",
                  "--batch", "8", "--epochs", "2", "--collector", collector.address],
                 with_token(env, token), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sent to the collector" in done.stderr, done.stderr[-3000:]
    [sent] = list((tmp_path / "spool" / "sent").iterdir())
    with Client(collector.address, collector.admin_token) as client:
        stored = client.get_run(sent.stem)
    run = stored.run
    assert run.result.status == record.RunStatus.RUN_STATUS_OK
    assert run.config.gpu_count == 0 and run.config.image_size == 32
    assert run.config.batch_per_gpu == 8 and run.config.train_images > 0
    assert run.software.backend == "tensorflow" and run.software.keras_version
    assert run.result.epoch2_seconds > 0 and run.result.train_images_per_second > 0
    assert run.result.startup_seconds == pytest.approx(
        run.result.epochs[0].wall_seconds - run.result.epochs[1].wall_seconds)


def test_a_run_is_compared_with_the_others_like_it_not_itself(
        tmp_path, fake_workload_command, collector, trace_path, make_run) -> None:
    env = agent_env(tmp_path, fake_workload_command, GPUBENCH_NVML_TRACE=str(trace_path),
                    FAKE_WORKLOAD_EPOCH_SECONDS="0.5")
    token = collector.make_token("lab")
    args = ["run", "--models", "B0", "--batch", "8", "--collector", collector.address]
    env = with_token(env, token)
    first = agent(args, env)
    assert first.returncode == 0, first.stderr
    # Unlike runs (another precision) stay out of the comparison.
    with Client(collector.address, token) as client:
        client.submit_run(make_run(gpu_name="Tesla T4", precision="mixed_float16"))
    second = agent(args, env)
    assert second.returncode == 0, second.stderr
    text = " ".join(second.stderr.split())
    assert "B0: this run beside the collector's others like it" in text, second.stderr
    assert "1x NVIDIA H200 (this run) 1" in text
    assert "nothing to compare with" not in text and "Tesla T4" not in text
    rows = [line for line in second.stderr.splitlines() if line.startswith("1x NVIDIA H200")]
    assert len(rows) == 2 and rows[1].split()[3] == "1"  # the first run alone, not itself


def test_a_run_whose_gpu_waited_is_warned_flagged_and_left_out(
        tmp_path, fake_workload_command, collector, trace_path) -> None:
    # The recorded H200 replayed from its first, idle seconds (no "train" phase to skip
    # to): the live workload's epochs see a GPU that waited, as a host-bound run's do.
    idle = json.loads(trace_path.read_text())
    idle.pop("phases")
    idle_trace = tmp_path / "idle-trace.json"
    idle_trace.write_text(json.dumps(idle))
    env = agent_env(tmp_path, fake_workload_command, GPUBENCH_NVML_TRACE=str(idle_trace),
                    FAKE_WORKLOAD_EPOCH_SECONDS="0.8")
    token = collector.make_token("lab")
    done = agent(["run", "--models", "B0", "--batch", "8", "--collector", collector.address],
                 with_token(env, token))
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "measures the host and the framework, not the GPU" in said, done.stderr

    [sent] = list((tmp_path / "spool" / "sent").iterdir())
    with Client(collector.address, collector.admin_token) as client:
        stored = client.get_run(sent.stem)
    [warning] = [w for w in stored.run.result.warnings if "not the GPU" in w]
    assert warning.startswith("the GPU was busy 0% of epoch 2 (")
    assert stored.flagged and f"host-bound: {warning}" in stored.flag_reasons

    gpubench = [str(Path(sys.executable).with_name("gpubench")), "--collector",
                collector.address, "--token", token, "compare", "--model", "B0",
                "--format", "json"]
    left_out = subprocess.run(gpubench, capture_output=True, text=True, env=env, timeout=60)
    shown = subprocess.run([*gpubench, "--include-flagged"], capture_output=True, text=True,
                           env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert [g["runs"] for g in json.loads(shown.stdout)["groups"]] == [1]
    assert sent.stem not in left_out.stdout
    assert left_out.returncode != 0 or json.loads(left_out.stdout)["groups"] == [], (
        left_out.stdout + left_out.stderr)


@pytest.mark.parametrize(("args", "words"), [
    (["run", "--models", "B9", "--offline"], "--models: 'B9' is not one of B0, B3, B7"),
    (["run", "--batch", "x", "--offline"], "--batch: --batch 'x'"),
    (["run", "--no-such-flag"], "no such option '--no-such-flag'"),
    (["run", "--models", "B0"], "give --collector HOST:PORT"),
    (["no-such-command"], "no such command 'no-such-command'"),
], ids=["bad-model", "bad-batch", "unknown-flag", "no-collector", "unknown-command"])
def test_a_usage_error_is_one_message_within_80_columns(tmp_path, args, words) -> None:
    """Before, click's own text: a usage line, a hint and "Error: ..." of 121-192 columns."""
    done = agent(args, {**agent_env(tmp_path, ["false"]), "COLUMNS": "80"})
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr
    assert said.startswith("gpubench-agent: ") and words in said, said
    assert "--help)" in said and "Usage:" not in said and "Error:" not in said
    assert all(len(line) <= 80 for line in done.stderr.splitlines()), done.stderr


# The real workload in a Python where torch cannot be imported, as on a host that installed
# only the [workload] extra (Keras on TensorFlow).
WITHOUT_TORCH = shlex.join([sys.executable, "-c", (
    "import runpy, sys\n"
    "sys.modules['torch'] = None\n"
    "runpy.run_module('gpubench.agent.workload', run_name='__main__')\n")])


def test_a_backend_that_is_not_installed_says_what_to_install(tmp_path) -> None:
    """Before: a bare ModuleNotFoundError, exit 1, and an error run spooled (and sent)."""
    env = agent_env(tmp_path, None, GPUBENCH_WORKLOAD_COMMAND=WITHOUT_TORCH, COLUMNS="80")
    done = agent(["run", "--models", "B0", "--backend", "torch", "--offline",
                  "--image-size", "32", "--train-images", "39", "--batch", "8"], env,
                 timeout=300)
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr
    assert "gpubench-agent: B0: torch is not installed in the workload's Python" in said, said
    assert "pip install 'gpubench-keras[torch]'" in said and "another --backend" in said
    assert "ModuleNotFoundError" not in done.stderr and "Traceback" not in done.stderr
    spooled = [p for p in (tmp_path / "spool").rglob("*.json")]
    assert not spooled, spooled  # nothing ran: no run to keep, none to send


@pytest.mark.parametrize("model", ["missing.keras", "nowhere/build.py:make"])
def test_a_missing_model_file_is_refused_before_the_workload_starts(tmp_path, model) -> None:
    """Before: found by the workload, once its framework had loaded."""
    started = tmp_path / "started"
    env = agent_env(tmp_path, ["touch", str(started)], COLUMNS="80")
    done = subprocess.run([*AGENT, "run", "--models", model, "--offline"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr
    path = model.rpartition(":")[0] or model
    assert f"gpubench-agent: --models {model}: no such file {path} (in {tmp_path})" in said
    assert not started.exists()  # no workload was started
    assert not list((tmp_path / "spool").rglob("*.json"))


def test_a_collector_address_that_answers_http_stops_the_run_before_training(
        tmp_path, fake_workload_command) -> None:
    """The results site's address given as the collector's: a wrong address, not a
    collector down; before, the agent trained the whole run, then kept it in the spool."""
    import http.server
    import threading

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    serving = threading.Thread(target=web.serve_forever, daemon=True)
    serving.start()
    started = tmp_path / "started"
    try:
        env = agent_env(tmp_path, ["touch", str(started)], COLUMNS="80")
        done = agent(["run", "--models", "B0", "--collector",
                      f"127.0.0.1:{web.server_address[1]}"], with_token(env, "gpb_any"))
    finally:
        web.shutdown()
        web.server_close()
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr
    assert "answers HTTP, not gRPC" in said and "nothing was run" in said, said
    assert not started.exists() and not list((tmp_path / "spool").rglob("*.json"))


@pytest.mark.slow  # the real workload loads torch to read the model: make test-e2e
def test_a_refused_model_is_said_once(tmp_path) -> None:
    """A model gpubench cannot feed: one error, the agent's (before, the workload's error
    line came first, then the same words again)."""
    tiny = Path(__file__).resolve().parents[1] / "workload" / "tiny_models.py"
    env = agent_env(tmp_path, None, COLUMNS="80")
    done = agent(["run", "--models", f"{tiny}:two_inputs", "--backend", "torch", "--offline",
                  "--train-images", "32", "--batch", "4"], env, timeout=300)
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr
    assert said.count("gpubench feeds models of one input and one output") == 1, said
    assert "gpubench-agent: " in said
