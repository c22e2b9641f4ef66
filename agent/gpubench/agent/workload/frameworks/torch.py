"""PyTorch under Keras: the CUDA caching allocator, CUDA syncs and events, the fast paths.

Peak memory: max_memory_allocated / reset_peak_memory_stats, and what the
allocator reserved at its peak. --memory-limit: a per-process memory fraction
(the CUDA context's memory counted in the limit), lifted again with None. Keras's
torch backend has no data parallelism of its own: torch_ddp runs one process per
GPU. On a GPU the steps are timed with CUDA events, batches are copied to the GPU
in the prefetching thread, and the compiled steps keep the host ahead of the GPU
(torch_async) and replay as CUDA graphs (cuda_graphs), each only where
keras_internals finds the Keras it was tested on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpubench.agent.workload.frameworks.base import Framework, cudnn_version_text
from gpubench.agent.workload.frameworks.types import GpuMemory, MemoryReport, TrialMemory
from gpubench.errors import GpubenchError
from gpubench.settings import MATH_TF32, math_mode_name


class Torch(Framework):
    """Keras on PyTorch."""

    name = "torch"
    recovers_from_out_of_memory = True
    replicas_in_processes = True

    def __init__(self) -> None:
        # The allocator caps limit_memory set, per device: what a trial may use.
        self._allowed: dict[int, int] = {}
        # What each device had in use when limit_memory first looked.
        self._context: dict[int, int] = {}

    def gpu_count(self) -> int:
        import torch

        return torch.cuda.device_count()

    def versions(self) -> dict[str, str]:
        import torch

        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        return {"backend_version": torch.__version__,
                "cuda_runtime_version": torch.version.cuda or "",
                "cudnn_version": cudnn_version_text(cudnn) if cudnn else ""}

    def synchronize(self) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def set_math_mode(self, mode: str) -> None:
        """TF32 for both or for neither: torch's own default is TF32 convolutions and
        float32 matrix products, which neither JAX nor TensorFlow computes."""
        import torch

        tf32 = mode == MATH_TF32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32

    def math_mode(self) -> str:
        import torch

        return math_mode_name(bool(torch.backends.cudnn.allow_tf32),
                              bool(torch.backends.cuda.matmul.allow_tf32))

    # --- memory --------------------------------------------------------------------

    def reset_peaks(self, gpus: int) -> None:
        import torch

        for i in range(gpus):
            torch.cuda.reset_peak_memory_stats(i)

    def read_peaks(self, gpus: int) -> MemoryReport:
        import torch

        return MemoryReport([
            GpuMemory(i, int(torch.cuda.max_memory_allocated(i)),
                      int(torch.cuda.get_device_properties(i).total_memory),
                      int(torch.cuda.max_memory_reserved(i)))
            for i in range(gpus)
        ])

    def read_trial(self) -> TrialMemory:
        """The allocated and reserved peaks, and as capacity what is free plus what the
        allocator holds, within limit_memory's cap."""
        import torch

        free, _ = torch.cuda.mem_get_info(0)
        reserved_now = int(torch.cuda.memory_reserved(0))
        capacity = free + reserved_now
        limit = self._allowed.get(0, 0)
        return TrialMemory(int(torch.cuda.max_memory_allocated(0)),
                           int(torch.cuda.max_memory_reserved(0)),
                           min(capacity, limit) if limit else capacity)

    def trial_environment(self) -> dict[str, str]:
        # cuDNN's v8 API takes about 6 s to set up EfficientNet's convolutions for each
        # new batch shape on an H200; the older API about 0.3 s, with the same allocated
        # and reserved peaks to the byte at every batch tried, but kernels that train B7
        # at half the speed (docs/results/h200-default-run.md, calls 14 and 15).
        return {"TORCH_CUDNN_V8_API_DISABLED": "1"}

    def release(self) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def limit_memory(self, gpus: int, limit_bytes: int | None) -> list[str]:
        """The allocator's fraction of each card set so that it may take the limit less
        what the card held before training; None sets the whole card again."""
        import torch

        notes = []
        for i in range(gpus):
            free, total = torch.cuda.mem_get_info(i)
            # This process's CUDA context (and any other process's memory), read before
            # this process allocated anything and kept for later limits.
            context = self._context.setdefault(i, total - free)
            if limit_bytes is None:
                torch.cuda.set_per_process_memory_fraction(1.0, i)
                self._allowed.pop(i, None)
                continue
            allowed = limit_bytes - context
            if allowed <= 0:
                raise GpubenchError(f"--memory-limit {limit_bytes} bytes is less than the "
                                    f"{context} bytes in use on GPU {i} before training")
            torch.cuda.set_per_process_memory_fraction(min(1.0, allowed / total), i)
            self._allowed[i] = allowed
            notes.append(f"--memory-limit: GPU {i}'s allocator may take {allowed} bytes "
                         f"(the limit less {context} bytes in use before training)")
        return notes

    # --- timing, batches, steps ------------------------------------------------------

    def times_steps_on_device(self, on_gpu: bool) -> bool:
        if not on_gpu:
            return False
        import torch

        return torch.cuda.is_available()

    def device_copy(self) -> Callable[[np.ndarray], Any] | None:
        """A copy to the GPU Keras trains on: in the prefetching thread, the copy waits
        for the GPU's queued work there, not in the thread that queues the steps."""
        device = _training_gpu()
        if device is None:
            return None
        import torch

        return lambda array: torch.from_numpy(array).to(device)

    def device_source(self, images: np.ndarray, labels: np.ndarray) -> OnDevice:
        return OnDevice(images, labels)

    def prepare_steps(self, network: Any, *, gpus: int, cuda_graphs: bool) -> Any:
        """On a GPU: keep the host from waiting inside a step (torch_async) and, with
        `cuda_graphs`, replay the steps as CUDA graphs. Either is left out, with one
        warning, where the installed Keras is not the one it was tested on."""
        if gpus == 0:
            return None
        from gpubench.agent.workload import keras_internals

        if keras_internals.usable(keras_internals.TORCH_ASYNC, network):
            from gpubench.agent.workload import torch_async

            torch_async.keep_host_ahead(network)
        if not cuda_graphs or not keras_internals.usable(keras_internals.CUDA_GRAPHS, network):
            return None
        from gpubench.agent.workload import cuda_graphs as graphs

        return graphs.use_cuda_graphs(network)


class OnDevice:
    """The decoded images and labels as tensors on the training device (a pipeline.Source).

    Each epoch's order is copied to the device once, so taking a batch copies
    nothing from the host: a copy from pageable host memory would make the host
    wait for the device to finish all queued work, every step.
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        import torch

        self._torch = torch
        self._device = _training_gpu() or torch.device("cpu")
        self._images = torch.from_numpy(images).to(self._device)
        self._labels = torch.from_numpy(labels).to(self._device)

    def order(self, indices: np.ndarray) -> object:
        return self._torch.from_numpy(np.ascontiguousarray(indices)).to(self._device)

    def batch(self, indices: object) -> tuple[object, object]:
        return self._images[indices], self._labels[indices]


def _training_gpu() -> Any:
    """The GPU Keras's torch backend places tensors on, or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.device("cuda", torch.cuda.current_device())
