"""Inventory: the host, GPUs from the recorded H200 trace, and a host without a driver."""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
from pathlib import Path

from gpubench.agent import inventory
from gpubench.agent.nvml_replay import FakeNvml


def test_host_is_described_without_its_name(agent_state: Path) -> None:
    host = inventory.host_record()
    assert host.cpu_cores == os.cpu_count()
    assert host.ram_bytes > 1 << 30
    assert host.cpu_model and host.os
    assert socket.gethostname() not in str(host)
    # A keyed hash, not the plain one anybody can compute from a list of hostnames.
    assert host.hostname_hash != hashlib.sha256(socket.gethostname().encode()).hexdigest()
    key = bytes.fromhex((agent_state / "host-key").read_text())
    assert host.hostname_hash == hmac.new(key, socket.gethostname().encode(),
                                          hashlib.sha256).hexdigest()
    assert inventory.host_record().hostname_hash == host.hostname_hash  # stable


def test_gpus_from_the_recorded_trace(trace_path: Path) -> None:
    fake = FakeNvml.from_trace(trace_path)
    recorded = fake.trace["gpus"][0]
    found = inventory.take_inventory(fake)
    assert not found.cpu_only and found.no_gpu_reason == ""
    gpu = found.gpus[0]
    assert gpu.name == recorded["name"]
    assert gpu.memory_total_bytes == recorded["memory_total_bytes"]
    assert gpu.driver_version == fake.trace["system"]["driver_version"]
    assert gpu.cuda_version == fake.trace["system"]["cuda_version"]
    assert gpu.compute_capability == recorded["compute_capability"]
    assert gpu.pcie_generation == recorded["pcie_generation"]
    assert gpu.uuid_hash == hashlib.sha256(recorded["uuid"].encode()).hexdigest()
    assert recorded["uuid"] not in str(gpu)


def test_unsupported_modes_are_said_so(trace_path: Path) -> None:
    fake = FakeNvml.from_trace(trace_path)
    gpu = dict(fake.trace["gpus"][0], ecc_mode=None, persistence_mode=None, pcie_width=None,
               missing=["ecc_mode", "persistence_mode", "pcie_width"])
    record = inventory.gpu_record(gpu, fake.trace["system"])
    assert record.ecc_mode == "unsupported" and record.persistence_mode == "unsupported"
    assert record.pcie_width == 0


def test_no_driver_is_one_line_and_a_cpu_only_inventory() -> None:
    handle, found = inventory.open_and_take_inventory()
    if handle is not None:  # pragma: no cover - on a GPU machine
        handle.close()
        assert found.gpus
        return
    assert found.cpu_only
    assert found.no_gpu_reason.startswith("no NVIDIA driver found (NVML: ")
    assert found.no_gpu_reason.endswith("running CPU-only")
    assert "\n" not in found.no_gpu_reason
    assert found.to_dict()["gpus"] == []


def test_the_host_line_says_the_memory_a_container_may_use() -> None:
    from gpubench.agent.inventory import host_line

    host = {"cpu_model": "Xeon", "cpu_cores": 2, "ram_bytes": str(24 << 30), "os": "Linux"}
    limited = host_line({"host": host, "usable_ram_bytes": 8 << 30})
    assert "24 GiB RAM (8.0 GiB of it usable here: the cgroup's limit)" in limited
    assert "usable" not in host_line({"host": host, "usable_ram_bytes": 24 << 30})
