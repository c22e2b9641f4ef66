"""Whether a run's measured epoch kept its GPUs busy: the guard against figures that time
the host and the framework rather than the GPU.

NVML's utilisation is the share of each sample period in which a kernel ran on the GPU.
The agent samples it through the measured epoch (Epoch.mean_gpu_utilization, over
Epoch.samples ticks). A run whose GPUs were mostly idle then spent epoch 2 waiting for
Python, the input pipeline or the framework's dispatch: its time says little about the
card, and two cards would time alike. The agent warns of it in the record, and the
collector flags it (stored and shown, left out of leaderboards and comparisons unless
asked for), as it does implausible runs.

The threshold is set from every GPU record in docs/results (docs/protocol.md, "Flagged:
a GPU that waited"; bench/gpu_busy_calibration.py): the default runs kept an H200 busy
59-98% of epoch 2; torch without CUDA graphs on B0, 10-25%; Keras on JAX running one
operation at a time, 3.6%.
"""

from __future__ import annotations

from gpubench import record
from gpubench.v1 import run_pb2

# Below this mean utilisation (percent) over the measured epoch, the GPU mostly waited.
BUSY_THRESHOLD_PERCENT = 30.0
# NVML's utilisation is a share of a sample period of 1/6 s to 1 s, so a figure over fewer
# samples than this (an epoch under half a second at the agent's 10 Hz) is not judged.
MIN_SAMPLES = 5


def idle_gpu_warning(run: run_pb2.Run) -> str | None:
    """The warning for a run whose GPUs were mostly idle in its measured epoch; None for a
    busy GPU, a CPU run, a run that failed, or a figure on too few samples to judge."""
    epoch = record.measured_epoch(run)
    if (run.config.gpu_count == 0 or epoch is None or epoch.samples < MIN_SAMPLES
            or run.result.status != run_pb2.RUN_STATUS_OK):
        return None
    busy = epoch.mean_gpu_utilization
    if busy >= BUSY_THRESHOLD_PERCENT:
        return None
    return (f"the GPU was busy {busy:.0f}% of epoch {epoch.number} ({epoch.samples} NVML "
            f"samples; under {BUSY_THRESHOLD_PERCENT:.0f}% is mostly idle): this figure "
            "measures the host and the framework, not the GPU")


def few_samples_note(run: run_pb2.Run) -> str | None:
    """A note for a GPU run whose measured epoch's telemetry rests on fewer than
    MIN_SAMPLES samples (how busy the GPU was is then not judged); None otherwise."""
    epoch = record.measured_epoch(run)
    if run.config.gpu_count == 0 or epoch is None or epoch.samples >= MIN_SAMPLES:
        return None
    return (f"epoch {epoch.number}'s GPU telemetry rests on {epoch.samples} NVML sample(s), "
            f"too few to say how busy the GPU was (--sample-hz samples more often)")
