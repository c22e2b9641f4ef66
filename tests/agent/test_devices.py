"""The workload's GPUs as CUDA numbers them, matched to NVML's devices by UUID: the agent
samples the cards the workload trains on, whatever CUDA_VISIBLE_DEVICES says."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from test_agent_cli import agent, agent_env

from gpubench import record
from gpubench.agent import devices, inventory
from gpubench.agent.nvml_replay import FakeNvml
from gpubench.agent.telemetry import Sampler, aggregate

UUIDS = [f"GPU-{k}{k}{k}{k}aaaa-0000-1111-2222-33334444555{k}" for k in range(4)]
# The card the tests train on: NVML's device 2, an H200 among T4s.
TARGET = 2
T4_POWER_SHARE = 0.05  # the T4s' power: a twentieth of the H200's recorded samples


def four_gpus(trace_path: Path) -> dict[str, Any]:
    """The recorded H200 trace as a host of four GPUs: NVML's device 2 is the H200 as
    recorded, the others are T4s drawing a twentieth of its power."""
    trace = json.loads(trace_path.read_text())
    h200 = trace["gpus"][0]
    t4 = {**h200, "name": "Tesla T4", "memory_total_bytes": 15360 << 20,
          "compute_capability": "7.5", "power_limit_watts": 70.0}
    trace["gpus"] = [{**(h200 if k == TARGET else t4), "index": k, "uuid": UUIDS[k]}
                     for k in range(4)]
    samples = []
    for sample in trace["samples"]:
        for k in range(4):
            copied = copy.deepcopy(sample)
            copied["index"] = k
            if k != TARGET:
                copied["power_watts"] = sample["power_watts"] * T4_POWER_SHARE
                copied["energy_millijoules"] = int(sample["energy_millijoules"] * T4_POWER_SHARE)
                copied["processes"] = {}
            samples.append(copied)
    trace["samples"] = samples
    return trace


@pytest.fixture
def host(trace_path: Path) -> FakeNvml:
    return FakeNvml(four_gpus(trace_path))


def test_the_environment_is_read_as_cuda_reads_it() -> None:
    def chosen(listed: str | None, **env: str) -> tuple[int, ...]:
        if listed is not None:
            env[devices.VISIBLE_ENV] = listed
        return devices.from_environment(env, UUIDS).nvml_indices

    assert chosen(None) == (0, 1, 2, 3)
    assert chosen("2,3") == (2, 3)
    assert chosen("3, 1") == (3, 1)
    assert chosen(UUIDS[2]) == (2,)
    assert chosen("GPU-2222") == (2,)  # a UUID's prefix, as CUDA takes it
    assert chosen("GPU-") == ()  # every UUID's prefix: names none
    assert chosen("2,7,1") == (2,)  # the first entry naming no GPU ends the list
    assert chosen("1,1,2") == (1,)  # so does one named again
    assert chosen("MIG-1234,0") == ()
    assert chosen("") == () and chosen("-1") == ()


def test_an_index_is_only_trusted_in_pci_bus_order() -> None:
    unsure = devices.from_environment({devices.VISIBLE_ENV: "2"}, UUIDS)
    assert "PCI bus order" in unsure.warning and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in unsure.warning
    sure = devices.from_environment(
        {devices.VISIBLE_ENV: "2", devices.ORDER_ENV: "PCI_BUS_ID"}, UUIDS)
    by_uuid = devices.from_environment({devices.VISIBLE_ENV: UUIDS[2]}, UUIDS)
    assert sure.warning == by_uuid.warning == ""


def test_cuda_is_asked_first_and_matched_by_uuid(host: FakeNvml) -> None:
    # CUDA, asked, sees two GPUs fastest first: NVML's 3, then 1.
    found = devices.find_visible(host, {devices.VISIBLE_ENV: "1,3"},
                                 ask_cuda=lambda: [UUIDS[3], UUIDS[1]])
    assert found.nvml_indices == (3, 1) and "by UUID" in found.how
    # A GPU CUDA sees that NVML does not: said, not guessed.
    odd = devices.find_visible(host, {devices.VISIBLE_ENV: "0"},
                               ask_cuda=lambda: ["GPU-ffffffff-0000-0000-0000-000000000000"])
    assert odd.nvml_indices == () and "not among NVML's" in odd.warning


def test_the_view_reads_the_workloads_cards(host: FakeNvml) -> None:
    view, found = devices.visible_nvml(host, {devices.VISIBLE_ENV: UUIDS[TARGET]},
                                       ask_cuda=lambda: None)
    assert found.nvml_indices == (TARGET,) and view.gpu_count() == 1
    assert view.gpu(0)["name"] == "NVIDIA H200" and view.gpu(0)["index"] == 0
    sample = view.sample(0)
    assert sample.index == 0
    assert sample.power_watts == host.sample(TARGET).power_watts
    assert sample.power_watts != host.sample(0).power_watts
    # The inventory lists the workload's card as its GPU 0.
    [gpu] = inventory.take_inventory(view).gpus
    assert (gpu.index, gpu.name) == (0, "NVIDIA H200")
    assert gpu.uuid_hash == hashlib.sha256(UUIDS[TARGET].encode()).hexdigest()
    # The sampler, told GPU 0 as the workload numbers it, samples the H200.
    sampler = Sampler(view, [0], hz=50.0)
    sampler.start()
    try:
        import time

        time.sleep(0.3)
    finally:
        sampler.stop()
    window = aggregate(sampler.ticks, sampler.ticks[0].t, sampler.ticks[-1].t)
    assert window.mean_power_watts > 70.0  # more than a T4 may draw: the H200's
    # Every GPU in NVML's order is no view at all.
    same, _ = devices.visible_nvml(host, {}, ask_cuda=lambda: None)
    assert same is host


def test_the_uuid_is_written_as_nvml_writes_it() -> None:
    raw = bytes(range(16))
    assert devices.format_uuid(raw) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"


def test_a_run_samples_the_card_cuda_visible_devices_names(tmp_path: Path, trace_path: Path,
                                                           fake_workload_command) -> None:
    host_trace = tmp_path / "four-gpus.json"
    host_trace.write_text(json.dumps(four_gpus(trace_path)))
    env = agent_env(tmp_path, fake_workload_command, GPUBENCH_NVML_TRACE=str(host_trace),
                    CUDA_VISIBLE_DEVICES=UUIDS[TARGET], FAKE_WORKLOAD_EPOCH_SECONDS="0.5")
    done = agent(["run", "--models", "B0", "--batch", "8", "--offline", "--json"], env)
    assert done.returncode == 0, done.stderr
    assert f"NVML device(s) {TARGET}" in done.stderr
    [run] = [record.from_dict(data) for data in json.loads(done.stdout)]
    [gpu] = run.gpus
    assert (gpu.index, gpu.name) == (0, "NVIDIA H200")
    assert gpu.uuid_hash == hashlib.sha256(UUIDS[TARGET].encode()).hexdigest()
    # The power is the H200's, not NVML device 0's (a T4 at a twentieth of it).
    assert run.result.mean_power_watts > 70.0
    assert run.gpus[0].power_limit_watts == 700.0


def test_cuda_visible_devices_that_hides_every_gpu_runs_cpu_only(
        tmp_path: Path, trace_path: Path, fake_workload_command) -> None:
    host_trace = tmp_path / "four-gpus.json"
    host_trace.write_text(json.dumps(four_gpus(trace_path)))
    env = agent_env(tmp_path, fake_workload_command, GPUBENCH_NVML_TRACE=str(host_trace),
                    CUDA_VISIBLE_DEVICES="")
    done = agent(["run", "--models", "B0", "--offline", "--json"], env)
    assert done.returncode == 0, done.stderr
    assert "leaves none of this host's 4 GPU(s)" in done.stderr
    [data] = json.loads(done.stdout)
    assert record.from_dict(data).config.gpu_count == 0
