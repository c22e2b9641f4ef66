"""What the run happened on: the host (CPU, RAM, OS) and its GPUs (through nvml.py).

Identities are never recorded as they are: the hostname as a keyed hash under the
host's own random key (agent/gpubench/agent/hostid.py), each GPU's UUID as its SHA-256. Framework
versions are not read here (the agent never imports the framework); the workload
reports them in its started event.
"""

from __future__ import annotations

import hashlib
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpubench.agent.hostid import HostKey, host_id, host_key
from gpubench.agent.memory_cgroup import usable_memory
from gpubench.agent.nvml import Nvml, NvmlUnavailable, open_nvml
from gpubench.v1 import run_pb2
from gpubench.versions import VERSION

UNSUPPORTED = "unsupported"

# Inventory fields that the run record keeps as text: "unsupported" where NVML
# cannot say (a consumer card has no ECC), rather than an empty string.
_TEXT_WHEN_MISSING = {"ecc_mode", "persistence_mode"}


def sha256_text(text: str) -> str:
    """The hex SHA-256 of a string (how identities are recorded)."""
    return hashlib.sha256(text.encode()).hexdigest()


def cpu_model() -> str:
    """The CPU's marketing name, from /proc/cpuinfo where there is one."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ram_bytes() -> int:
    """Total system memory in bytes (0 where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def os_description() -> str:
    """e.g. 'Linux 6.8.0-45-generic (Ubuntu 24.04.1 LTS)'."""
    text = f"{platform.system()} {platform.release()}"
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return f"{text} ({line.split('=', 1)[1].strip().strip(chr(34))})"
    except OSError:
        pass
    return text


def host_record(key: HostKey | None = None) -> run_pb2.Host:
    """The host's part of the run record (container fields are the runner's); the
    hostname as a keyed hash under `key` (default: the host's, from the state folder)."""
    key = key or host_key()
    return run_pb2.Host(
        cpu_model=cpu_model(),
        cpu_cores=os.cpu_count() or 0,
        ram_bytes=ram_bytes(),
        os=os_description(),
        hostname_hash=host_id(key.key),
        agent_version=VERSION,
    )


def gpu_record(gpu: dict[str, Any], system: dict[str, Any]) -> run_pb2.Gpu:
    """One GPU's part of the run record, from nvml inventory dicts."""
    record = run_pb2.Gpu(index=int(gpu["index"]))
    values = {
        "name": gpu.get("name"),
        "memory_total_bytes": gpu.get("memory_total_bytes"),
        "driver_version": system.get("driver_version"),
        "cuda_version": system.get("cuda_version"),
        "compute_capability": gpu.get("compute_capability"),
        "ecc_mode": gpu.get("ecc_mode"),
        "power_limit_watts": gpu.get("power_limit_watts"),
        "pcie_generation": gpu.get("pcie_generation"),
        "pcie_width": gpu.get("pcie_width"),
        "persistence_mode": gpu.get("persistence_mode"),
        "uuid_hash": sha256_text(gpu["uuid"]) if gpu.get("uuid") else None,
    }
    for name, value in values.items():
        if value is None:
            value = UNSUPPORTED if name in _TEXT_WHEN_MISSING else None
        if value is not None:
            setattr(record, name, value)
    return record


@dataclass
class Inventory:
    """The host and its GPUs, and why GPUs are absent or fields missing."""

    host: run_pb2.Host
    gpus: list[run_pb2.Gpu] = field(default_factory=list)
    no_gpu_reason: str = ""  # set for a CPU-only host: the one line to show
    missing: dict[str, str] = field(default_factory=dict)  # field -> why NVML could not say
    # The memory this process may use: a container's or service's cgroup limit where it is
    # lower than the host's RAM (0: not read).
    usable_ram_bytes: int = 0

    @property
    def cpu_only(self) -> bool:
        """No GPU could be seen: runs are CPU-only."""
        return not self.gpus

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (field names as in the run record)."""
        from google.protobuf import json_format

        def plain(message: Any) -> dict[str, Any]:
            return json_format.MessageToDict(
                message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            )

        return {
            "host": plain(self.host),
            "gpus": [plain(gpu) for gpu in self.gpus],
            "cpu_only": self.cpu_only,
            "no_gpu_reason": self.no_gpu_reason,
            "missing": dict(self.missing),
            "usable_ram_bytes": self.usable_ram_bytes or int(self.host.ram_bytes),
        }


def no_driver_line(error: NvmlUnavailable) -> str:
    """The one line shown when there is no usable NVIDIA driver."""
    return f"no NVIDIA driver found (NVML: {error}); running CPU-only"


def take_inventory(nvml: Nvml | None) -> Inventory:
    """The inventory through an open `nvml`, or a CPU-only one when it is None."""
    key = host_key()
    inventory = Inventory(host=host_record(key))
    inventory.usable_ram_bytes = usable_memory(inventory.host.ram_bytes)
    if key.unstable:
        inventory.missing["hostname_hash"] = f"differs from run to run: {key.unstable}"
    if nvml is None:
        return inventory
    system = nvml.system()
    gpus = nvml.gpus()
    inventory.gpus = [gpu_record(gpu, system) for gpu in gpus]
    if not gpus:
        inventory.no_gpu_reason = "the NVIDIA driver sees no GPU; running CPU-only"
    errors = nvml.field_errors()
    for name in [*system.get("missing", ()), *(m for gpu in gpus for m in gpu.get("missing", ()))]:
        inventory.missing[name] = errors.get(name, "not readable")
    return inventory


def open_and_take_inventory() -> tuple[Nvml | None, Inventory]:
    """Open the driver and take the inventory; without a driver, a CPU-only inventory
    whose `no_gpu_reason` says why. The caller closes the returned Nvml.
    """
    nvml: Nvml | None = None
    try:
        nvml = open_nvml()
        return nvml, take_inventory(nvml)
    except NvmlUnavailable as exc:  # no driver, or one that cannot even count its GPUs
        if nvml is not None:
            nvml.close()
        inventory = take_inventory(None)
        inventory.no_gpu_reason = no_driver_line(exc)
        return None, inventory


# The columns of `gpubench-agent inventory`'s GPU table, gpu_cells' order.
GPU_COLUMNS = ("index", "name", "memory", "driver", "CUDA", "compute", "ECC", "power limit",
               "PCIe", "persistence")


def host_line(data: dict[str, Any]) -> str:
    """The host of Inventory.to_dict() in one line: CPU, cores, RAM, OS."""
    host = data["host"]
    ram, usable = int(host["ram_bytes"]), int(data.get("usable_ram_bytes") or 0)
    limited = (f" ({usable / (1 << 30):.1f} GiB of it usable here: the cgroup's limit)"
               if 0 < usable < ram else "")
    return (f"{host['cpu_model']}, {host['cpu_cores']} cores, "
            f"{ram / (1 << 30):.0f} GiB RAM{limited}, {host['os']}")


def gpu_cells(gpu: dict[str, Any]) -> list[str]:
    """One GPU of Inventory.to_dict() as the cells of GPU_COLUMNS."""
    return [
        str(gpu.get("index", 0)), gpu["name"],
        f"{int(gpu['memory_total_bytes']) / (1 << 30):.1f} GiB",
        gpu["driver_version"], gpu["cuda_version"], gpu["compute_capability"],
        gpu["ecc_mode"], f"{gpu['power_limit_watts']:.0f} W",
        f"gen {gpu['pcie_generation']} x{gpu['pcie_width']}", gpu["persistence_mode"],
    ]
