"""This host as a run sees it: the set-up `run` and `largest-batch` share.

In order, each step saying on the console what it found: open NVML (the driver, or a
replayed trace), keep the GPUs the workload will see (CUDA_VISIBLE_DEVICES) and take
their inventory, count the GPUs to train on, make the runner ready, and check the
workload's framework builds against those GPUs (compat.py), which settles the backend.
Then check_settings refuses, before anything runs, settings the workload would refuse.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpubench import models
from gpubench.agent import compat, devices
from gpubench.agent.display import RunDisplay
from gpubench.agent.inventory import Inventory, open_and_take_inventory, take_inventory
from gpubench.agent.nvml import Nvml
from gpubench.agent.runners import Runner, RunnerOptions, make_runner
from gpubench.agent.runners.base import SearchRequest, WorkloadRequest
from gpubench.agent.runners.gpu_access import NoGpuAccess
from gpubench.errors import ExitCode, GpubenchError
from gpubench.settings import BadSettings, RunSettings, default_backend, environment_backend

# For development and tests on machines without a GPU: replay a recorded NVML trace
# instead of the driver.
NVML_TRACE_ENV = "GPUBENCH_NVML_TRACE"


@dataclass
class Host:
    """What the set-up found: NVML (None without a driver, or once closed), the inventory
    of the GPUs the workload will see, how many it trains on, the runner that starts it,
    and the backend (None: the workload's default, as asked). Close it when done."""

    nvml: Nvml | None
    inventory: Inventory
    gpu_count: int
    runner: Runner
    backend: str | None

    def close(self) -> None:
        """Close NVML."""
        if self.nvml is not None:
            self.nvml.close()
            self.nvml = None

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def set_up(display: RunDisplay, *, gpus: int | None, runner: str, options: RunnerOptions,
           backend: str | None, skip_compat: bool, keep_nvml: bool = True) -> Host:
    """The whole set-up (the module's docstring): `gpus` as asked (None: 1, or 0 without
    a GPU), `runner` a name of the runners' registry, `backend` as asked (None: chosen by
    the builds). Without `keep_nvml`, NVML is closed once the inventory is taken (a
    search samples nothing). Raises GpubenchError (with NVML closed) where no run can
    start: more GPUs asked than seen, no way to give a container the GPUs, no build that
    runs on them."""
    nvml, inventory = read_host(display)
    if not keep_nvml and nvml is not None:
        nvml.close()
        nvml = None
    try:
        count = gpu_count(gpus, inventory, display)
        chosen = make_runner(runner, replace(options, gpu_count=count))
        line = chosen.prepare()
        if line:
            display.note(line)
        line = chosen.fit_to(run_gpus(inventory, count))
        if line:
            display.note(line)
        backend = check_builds(chosen, inventory, count, backend, display, skip_compat)
    except BaseException:
        if nvml is not None:
            nvml.close()
        raise
    return Host(nvml=nvml, inventory=inventory, gpu_count=count, runner=chosen, backend=backend)


def read_host(display: RunDisplay, *, as_workload_sees: bool = True
              ) -> tuple[Nvml | None, Inventory]:
    """NVML (the real driver, or a replayed trace) and this host's inventory; with
    `as_workload_sees`, only the GPUs the workload will train on, numbered as CUDA
    numbers them (CUDA_VISIBLE_DEVICES), matched to NVML's devices by UUID."""
    from gpubench.agent.nvml_replay import FakeNvml

    if os.environ.get(NVML_TRACE_ENV):
        nvml: Any = FakeNvml.from_trace(os.environ[NVML_TRACE_ENV])
        display.note(f"replaying the NVML trace {os.environ[NVML_TRACE_ENV]} (no real GPU is "
                     "read)", style="yellow")
        # The trace stands for the GPUs: this machine's own CUDA devices are not them.
        ask_cuda: Any = lambda: None  # noqa: E731
    else:
        nvml, inventory = open_and_take_inventory()
        if nvml is None or not as_workload_sees:
            return nvml, inventory
        ask_cuda = devices.cuda_uuids
    if not as_workload_sees:
        return nvml, take_inventory(nvml)
    every = nvml.gpu_count()
    nvml, visible = devices.visible_nvml(nvml, ask_cuda=ask_cuda)
    if visible.warning:
        display.note(visible.warning, style="yellow")
    elif os.environ.get(devices.VISIBLE_ENV) is not None:
        display.note(f"GPUs: {visible.how}")
    inventory = take_inventory(nvml)
    if every and not inventory.gpus:
        inventory.no_gpu_reason = (f"{devices.VISIBLE_ENV}={os.environ.get(devices.VISIBLE_ENV)} "
                                   f"leaves none of this host's {every} GPU(s); running CPU-only")
    return nvml, inventory


def gpu_count(gpus: int | None, inventory: Inventory, display: RunDisplay) -> int:
    """The GPUs to train on: as asked (checked against the host), else 1 or 0."""
    if inventory.no_gpu_reason:
        display.note(inventory.no_gpu_reason, style="yellow")
    available = len(inventory.gpus)
    count = gpus if gpus is not None else min(available, 1)
    if count > available:
        raise GpubenchError(f"--gpus: {count} asked, but this host has {available}",
                            exit_code=ExitCode.USAGE)
    if count == 0:
        display.note("CPU-only run: the figures are labelled CPU and compared as such")
    return count


def run_gpus(inventory: Inventory, gpu_count: int) -> list[compat.Gpu]:
    """The facts of the GPUs the run uses, as the compatibility check takes them."""
    return [compat.Gpu(gpu.name, gpu.compute_capability, gpu.driver_version,
                       gpu.cuda_version) for gpu in inventory.gpus[:gpu_count]]


def check_builds(runner: Runner, inventory: Inventory, gpu_count: int, backend: str | None,
                 display: RunDisplay, skip: bool) -> str | None:
    """The backend to run: the workload's framework builds checked against the GPUs the
    run uses (compat.py), at the cost of one short probe where the runner runs the
    workload. Raises GpubenchError (exit 2) saying why nothing runs there and what to
    install; leaves `backend` as given on a CPU-only run, with --no-compat-check, or when
    the workload cannot answer (an image older than the check)."""
    if gpu_count == 0:
        return backend  # the CPU runs every build
    if skip:
        display.note("--no-compat-check: the workload's builds are not checked against "
                     "the GPU", style="yellow")
        return backend
    asked, asked_by = backend, "--backend"
    if asked is None and environment_backend():
        asked = environment_backend()
        asked_by = f"KERAS_BACKEND={asked}"
    try:
        builds = compat.parse_probe_output(runner.probe(gpu_count))
    except NoGpuAccess:
        raise
    except Exception as exc:  # noqa: BLE001 - not knowing is no reason to stop the run
        display.note(f"the workload could not say what it was built for ({exc}); its "
                     "builds are not checked against the GPU", style="yellow")
        return backend
    choice = compat.choose(run_gpus(inventory, gpu_count), builds, asked=asked,
                           asked_by=asked_by, where=runner.where, runner=runner.name,
                           image=runner.image)
    display.note(choice.line)
    return choice.backend


def missing_model_file(model: str) -> str:
    """Why the file a model of --models names (a .keras file, or path/to/file.py:build)
    is not there: said before the workload starts, not after its framework loaded ('' if
    it is there, or the model is not a file's)."""
    kind = models.kind_of(model)
    if kind not in (models.FILE, models.FUNCTION):
        return ""
    path = Path(model if kind == models.FILE else model.rpartition(":")[0])
    if path.is_file():
        return ""
    where = "" if path.is_absolute() else f" (in {Path.cwd()})"
    return f"--models {model}: no such file {path}{where}"


def check_settings(requests: Sequence[WorkloadRequest | SearchRequest],
                   inventory: Inventory) -> None:
    """Refuse, before anything runs or is spooled, settings the workload would refuse
    (BadSettings, exit 2): each request's as the workload will read them, each
    --memory-limit of a search too. A run without a GPU says why it has none."""
    for request in requests:
        missing = missing_model_file(request.model)
        if missing:
            raise BadSettings(missing)
        values = {name: value for name, value in request.settings.items() if value is not None}
        values.setdefault("backend", default_backend())
        if isinstance(request, WorkloadRequest):
            values.update(batch=request.batch, batch_rule=request.batch_rule)
        limits = request.limits if isinstance(request, SearchRequest) else ()
        for limit in limits or (values.get("memory_limit_bytes"),):
            try:
                RunSettings(**{**values, "model": request.model, "memory_limit_bytes": limit})
            except BadSettings as exc:
                if not values.get("gpus") and inventory.no_gpu_reason:
                    reason = inventory.no_gpu_reason.removesuffix("; running CPU-only")
                    raise BadSettings(f"{exc}; this host has none the run can use "
                                      f"({reason})") from None
                raise
