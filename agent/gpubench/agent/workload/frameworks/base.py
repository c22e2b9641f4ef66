"""What the workload asks of a framework under Keras: the `Framework` interface.

One subclass per framework (tensorflow.py, torch.py, jax.py) answers for it:
start-up (environment, devices), versions, host syncs, GPU memory (peaks, a
batch trial's figures, the allocator's cache, --memory-limit), data parallelism
over several GPUs, how steps are timed, how batches reach the GPU, and the
faster training steps. A method whose answer is the same for most frameworks
has that answer here; a framework that differs overrides it.

The CPU-only cases (no GPU allocator, /proc's figures) stay with the callers
(memory.py): a framework's memory methods are asked only about GPUs.
Importing this module imports no framework.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from gpubench.agent.workload.frameworks.types import GpuMemory, MemoryReport, Source, TrialMemory
from gpubench.errors import GpubenchError

if TYPE_CHECKING:
    import numpy as np

    from gpubench.agent.workload.compilation_cache import ProgramLog


class Framework(ABC):
    """One framework under Keras. Subclasses import their framework inside their
    methods, never at module level: the class is chosen before Keras is imported."""

    name: ClassVar[str]  # the --backend name and KERAS_BACKEND value
    # Whether a process goes on after an out-of-memory error (the batch trials then
    # run in the run's own process, on one GPU); TensorFlow's cannot.
    recovers_from_out_of_memory: ClassVar[bool] = False
    # Whether data parallelism runs one process per device (torch_ddp) rather than
    # one process holding every device (a Keras distribution).
    replicas_in_processes: ClassVar[bool] = False

    # --- start-up ----------------------------------------------------------------

    def configure_environment(self, gpus: int) -> None:
        """Set what the framework reads from the environment at import, for `gpus`
        GPUs (0: the CPU only); CUDA_VISIBLE_DEVICES is already set."""
        return None  # nothing to do by default

    def configure_devices(self, *, memory_growth: bool) -> None:
        """Configure the GPUs before Keras imports the framework (once per process).

        `memory_growth=False` leaves them for limit_memory to configure instead."""
        return None  # nothing to do by default

    @abstractmethod
    def gpu_count(self) -> int:
        """GPUs the framework sees in this process."""

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """backend_version, cuda_runtime_version and cudnn_version as the framework
        reports them ('' where unknown)."""

    def synchronize(self) -> None:
        """Wait until the GPU has finished the work queued so far (a no-op where the
        host never runs ahead of the device)."""
        return None  # nothing to do by default

    def program_log(self) -> ProgramLog | None:
        """The XLA programs compiled or loaded from the compilation cache since the
        framework was imported (JAX); None where the framework does not count them."""
        return None

    @abstractmethod
    def set_math_mode(self, mode: str) -> None:
        """Compute float32 convolutions and matrix products as `mode` says
        (gpubench.settings.MATH_MODES: "tf32" or "float32")."""

    @abstractmethod
    def math_mode(self) -> str:
        """The math mode in effect, as the framework reports it
        (gpubench.settings.math_mode_name)."""

    # --- memory --------------------------------------------------------------------

    @abstractmethod
    def reset_peaks(self, gpus: int) -> None:
        """Start a new allocator peak on each of the first `gpus` GPUs (at least one)."""

    @abstractmethod
    def read_peaks(self, gpus: int) -> MemoryReport:
        """The allocator peak of each of the first `gpus` GPUs since the last reset."""

    def read_trial(self) -> TrialMemory:
        """A batch trial's peak and capacity on GPU 0 (no reserved figure by default)."""
        report = self.read_peaks(1)
        gpu = report.gpus[0] if report.gpus else GpuMemory(0, 0, 0)
        return TrialMemory(gpu.allocator_peak_bytes, 0, gpu.memory_total_bytes)

    def trial_environment(self) -> dict[str, str]:
        """Environment variables for a process that only makes batch trials: they make
        a new batch shape cheaper to set up and leave a step's memory as it is. Never
        for a run: they may make its steps slower. Empty: none."""
        return {}

    def release(self) -> None:
        """Give the allocator's cached blocks back (a no-op where the allocator keeps
        what it took). The caller has collected garbage already."""
        return None  # nothing to do by default

    def limit_memory(self, gpus: int, limit_bytes: int | None) -> list[str]:
        """Make each of the first `gpus` GPUs behave as a card of `limit_bytes`, before
        the framework's first allocation; None: no limit. Returns notes for the record."""
        if limit_bytes is None:
            return []
        raise GpubenchError(f"--memory-limit is not available on {self.name}")

    # --- data parallelism ----------------------------------------------------------

    def replicas(self, gpus: int) -> contextlib.AbstractContextManager[None]:
        """The scope the model must be built and compiled in to train on `gpus` GPUs."""
        if gpus <= 1:
            return contextlib.nullcontext()
        return self.data_parallel(gpus)

    @contextlib.contextmanager
    def data_parallel(self, gpus: int) -> Iterator[None]:
        """The scope of Keras's data parallelism over the first `gpus` GPUs (more than
        one); by default none: the framework's replicas run elsewhere."""
        yield

    # --- timing, batches, steps ------------------------------------------------------

    def times_steps_on_device(self, on_gpu: bool) -> bool:
        """Whether a step's end is taken on the device (timing.DeviceTimedEpochs)
        rather than on the host once Keras has the step's metrics."""
        return False

    def device_copy(self) -> Callable[[np.ndarray], Any] | None:
        """How a batch in host memory becomes a tensor on the GPU Keras trains on (called
        in the prefetching thread), or None where Keras takes host arrays as they are."""
        return None

    def device_source(self, images: np.ndarray, labels: np.ndarray) -> Source:
        """The decoded images and labels held as tensors on the training device, whole
        (--data-on-device): a pipeline.Source whose batches copy nothing from the host."""
        raise GpubenchError(f"--data-on-device is not available on {self.name}")

    def allow_compiling(self, network: Any) -> list[str]:
        """Before a compile with jit_compile: let the layers of `network` that this
        framework can compile say so, where Keras declares them uncompilable for every
        framework. Returns the names of the layers changed (none by default)."""
        return []

    def prepare_steps(self, network: Any, *, gpus: int, cuda_graphs: bool) -> Any:
        """Make the compiled `network`'s training and validation steps run faster
        without changing what they compute. Returns the CUDA graphs' statistics
        (cuda_graphs.GraphStats), or None when the steps run as Keras runs them."""
        return None


def cuda_version_text(number: int) -> str:
    """CUDA's integer version (1000 * major + 10 * minor, e.g. 12040) as '12.4'."""
    return f"{number // 1000}.{number % 1000 // 10}"


def cudnn_version_text(number: int) -> str:
    """cuDNN's integer version as 'major.minor.patch' (90100 -> 9.1.0, 8902 -> 8.9.2)."""
    major_unit = 10000 if number >= 10000 else 1000  # cuDNN 9 widened the major field
    return f"{number // major_unit}.{number % major_unit // 100}.{number % 100}"
