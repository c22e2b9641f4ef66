"""Which NVML devices are the workload's GPUs, matched by UUID.

The workload trains on GPUs as CUDA numbers them: only those CUDA_VISIBLE_DEVICES lists
(by index or UUID), in CUDA_DEVICE_ORDER's order (fastest first unless PCI_BUS_ID).
NVML numbers every GPU of the host in PCI bus order. So with CUDA_VISIBLE_DEVICES=2,3
the workload's GPU 0 is NVML's device 2, and sampling NVML's device 0 would measure
another card's power and name. `visible_nvml` gives the agent an `Nvml` whose device i
is the workload's GPU i: CUDA itself is asked for its devices' UUIDs (the driver's
libcuda, no framework); where it cannot be, CUDA_VISIBLE_DEVICES is read as CUDA reads
it, an index taken in PCI bus order.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpubench.agent.nvml import GpuSample, Nvml

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
ORDER_ENV = "CUDA_DEVICE_ORDER"


@dataclass(frozen=True)
class Visible:
    """The workload's GPUs as NVML indices, in CUDA's order, and how that was found."""

    nvml_indices: tuple[int, ...]
    how: str  # one line for the console
    warning: str = ""  # where the match may be wrong


def cuda_uuids() -> list[str] | None:
    """The UUIDs of the GPUs CUDA sees from this process's environment, in CUDA's order
    ("GPU-xxxxxxxx-xxxx-..." as NVML writes them); None where the driver's CUDA library
    cannot be loaded or started. Loads no framework and makes no context."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    if cuda.cuInit(0) != 0:
        return None
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return None
    # cuDeviceGetUuid_v2 (CUDA 11.4 on) is the one newer drivers keep; both give a GPU's.
    get_uuid = getattr(cuda, "cuDeviceGetUuid_v2", None) or getattr(cuda, "cuDeviceGetUuid", None)
    if get_uuid is None:
        return None
    found = []
    for ordinal in range(count.value):
        device = ctypes.c_int()
        raw = (ctypes.c_ubyte * 16)()
        if cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0 or get_uuid(raw, device) != 0:
            return None
        found.append(format_uuid(bytes(raw)))
    return found


def format_uuid(raw: bytes) -> str:
    """16 bytes of a device UUID as NVML writes it: GPU-8-4-4-4-12 lowercase hex digits."""
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def from_environment(env: Mapping[str, str], nvml_uuids: Sequence[str | None]) -> Visible:
    """The workload's GPUs from CUDA_VISIBLE_DEVICES alone, read as CUDA reads it: entries
    are indices or (prefixes of) UUIDs; the first that names no GPU, or one named again,
    ends the list. An index is taken in PCI bus order (NVML's), which is CUDA's only
    under CUDA_DEVICE_ORDER=PCI_BUS_ID or among GPUs alike."""
    listed = env.get(VISIBLE_ENV)
    if listed is None:
        return Visible(tuple(range(len(nvml_uuids))), "every GPU (CUDA_VISIBLE_DEVICES unset)")
    chosen: list[int] = []
    by_index = False
    for entry in (e.strip() for e in listed.split(",")):
        index = _entry_index(entry, nvml_uuids)
        if index is None or index in chosen:
            break
        by_index = by_index or entry.isdigit()
        chosen.append(index)
    how = f"CUDA_VISIBLE_DEVICES={listed}: NVML device(s) {_indices(chosen)}"
    warning = ""
    if by_index and env.get(ORDER_ENV) != "PCI_BUS_ID":
        warning = (f"CUDA_VISIBLE_DEVICES={listed} numbers GPUs in CUDA's order, which the "
                   "agent could not ask CUDA for; taken in PCI bus order (set "
                   "CUDA_DEVICE_ORDER=PCI_BUS_ID, or list the GPUs by UUID, to be sure)")
    return Visible(tuple(chosen), how, warning)


def _entry_index(entry: str, nvml_uuids: Sequence[str | None]) -> int | None:
    if entry.lstrip("-").isdigit():
        number = int(entry)
        return number if 0 <= number < len(nvml_uuids) else None
    if entry.startswith("GPU-") and len(entry) > 4:
        matches = [i for i, uuid in enumerate(nvml_uuids) if uuid and uuid.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    return None  # MIG-... and anything else: CUDA stops here too


def _indices(indices: Sequence[int]) -> str:
    return ", ".join(map(str, indices)) or "none"


def find_visible(
    nvml: Nvml,
    env: Mapping[str, str] | None = None,
    ask_cuda: Callable[[], list[str] | None] = cuda_uuids,
) -> Visible:
    """The NVML devices the workload's GPUs are, in CUDA's order, matched by UUID."""
    env = os.environ if env is None else env
    uuids = [nvml.gpu(index).get("uuid") for index in range(nvml.gpu_count())]
    if VISIBLE_ENV not in env and env.get(ORDER_ENV) == "PCI_BUS_ID":
        return Visible(tuple(range(len(uuids))), "every GPU, in PCI bus order")
    seen = ask_cuda()
    if seen is None:
        return from_environment(env, uuids)
    chosen = []
    for uuid in seen:
        if uuid not in uuids:
            return Visible(tuple(range(len(uuids))) if VISIBLE_ENV not in env else (),
                           "CUDA and NVML disagree",
                           f"CUDA's GPU {uuid} is not among NVML's; GPU telemetry may be of "
                           "another card")
        chosen.append(uuids.index(uuid))
    listed = env.get(VISIBLE_ENV)
    where = f"CUDA_VISIBLE_DEVICES={listed}" if listed is not None else "CUDA"
    return Visible(tuple(chosen), f"{where}: NVML device(s) {_indices(chosen)}, by UUID")


class VisibleNvml(Nvml):
    """An `Nvml` whose device i is the workload's GPU i (CUDA's numbering): its
    inventory and samples carry that index, read from the matching NVML device."""

    def __init__(self, inner: Nvml, nvml_indices: Sequence[int]) -> None:
        self.inner = inner
        self.nvml_indices = tuple(nvml_indices)

    def system(self) -> dict[str, Any]:
        return self.inner.system()

    def gpu_count(self) -> int:
        return len(self.nvml_indices)

    def gpu(self, index: int) -> dict[str, Any]:
        return {**self.inner.gpu(self.nvml_indices[index]), "index": index}

    def sample(self, index: int) -> GpuSample:
        return dataclasses.replace(self.inner.sample(self.nvml_indices[index]), index=index)

    def field_errors(self) -> dict[str, str]:
        return self.inner.field_errors()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # The inner Nvml's own extras (a replayed trace's follow_workload, phase).
        return getattr(self.inner, name)


def visible_nvml(nvml: Nvml, env: Mapping[str, str] | None = None,
                 ask_cuda: Callable[[], list[str] | None] = cuda_uuids
                 ) -> tuple[Nvml, Visible]:
    """`nvml` seen as the workload sees its GPUs (itself where that is every GPU in
    NVML's order), and how they were matched."""
    found = find_visible(nvml, env, ask_cuda)
    if found.nvml_indices == tuple(range(nvml.gpu_count())):
        return nvml, found
    return VisibleNvml(nvml, found.nvml_indices), found
