"""The framework interface (agent/gpubench/agent/workload/frameworks): one implementation per
framework, chosen by name once, each importing its framework only when asked.

What needs no GPU: the choice, the lazy imports, and the answers that are the
same on every host (CPU memory, the scope of one GPU, --memory-limit refusals).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpubench.agent.workload import frameworks, memory
from gpubench.agent.workload.frameworks.base import (
    Framework,
    cuda_version_text,
    cudnn_version_text,
)
from gpubench.errors import GpubenchError

NAMES = ("tensorflow", "torch", "jax")


def test_one_implementation_per_framework_chosen_once() -> None:
    for name in NAMES:
        framework = frameworks.get(name)
        assert isinstance(framework, Framework) and framework.name == name
        assert frameworks.get(name) is framework  # the same instance every time
    with pytest.raises(ValueError, match="no framework 'theano'"):
        frameworks.get("theano")


def test_choosing_a_framework_imports_none() -> None:
    code = (
        "import sys\n"
        "from gpubench.agent.workload import backend, distribute, frameworks, memory\n"
        f"for name in {NAMES!r}:\n"
        "    frameworks.get(name)\n"
        "loaded = [m for m in ('keras', 'tensorflow', 'torch', 'jax') if m in sys.modules]\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == ""


def test_a_cpu_run_asks_no_framework_for_memory() -> None:
    for name in NAMES:
        report = memory.read_peaks(name, 0)
        assert report.gpus == [] and "CPU run" in report.notes[0]
        memory.reset_peaks(name, 0)
        found = memory.read_trial(name, 0, address_space_limit=1 << 40)
        assert found.capacity_bytes == 1 << 40 and found.peak_bytes > 0


def test_memory_limits_where_a_framework_has_none() -> None:
    jax = frameworks.get("jax")
    assert jax.limit_memory(1, None) == []
    with pytest.raises(GpubenchError, match="--memory-limit is not available on jax"):
        memory.limit_memory("jax", 1, 8 << 30)
    assert frameworks.get("tensorflow").limit_memory(1, None) == []
    with pytest.raises(GpubenchError, match="--data-on-device is not available on jax"):
        jax.device_source(None, None)  # type: ignore[arg-type]


def test_one_gpu_needs_no_data_parallel_scope() -> None:
    for name in NAMES:
        framework = frameworks.get(name)
        with framework.replicas(1):
            pass
        assert not framework.times_steps_on_device(False)
        assert framework.prepare_steps(None, gpus=0, cuda_graphs=False) is None
    with frameworks.get("torch").replicas(4):  # torch's replicas are processes (torch_ddp)
        pass


def test_version_numbers_as_text() -> None:
    assert cuda_version_text(12040) == "12.4"
    assert cudnn_version_text(90100) == "9.1.0" and cudnn_version_text(8902) == "8.9.2"


def test_trials_stay_in_the_run_s_process_only_where_the_framework_recovers() -> None:
    from gpubench.agent.workload.trials import warm_applies
    from gpubench.settings import RunSettings

    # torch goes on after an out-of-memory error; TensorFlow's process cannot.
    assert warm_applies(RunSettings(backend="torch", gpus=1))
    assert not warm_applies(RunSettings(backend="tensorflow", gpus=1))
    assert not warm_applies(RunSettings(backend="torch", gpus=2))
    assert frameworks.get("torch").replicas_in_processes
    assert not frameworks.get("tensorflow").replicas_in_processes


def test_only_processes_that_make_trials_only_take_the_trial_environment() -> None:
    import os

    from gpubench.agent.workload.trials import use_trial_environment
    from gpubench.settings import RunSettings

    # torch: cuDNN's older API sets up a new batch shape in a fraction of the time.
    assert frameworks.get("torch").trial_environment() == {"TORCH_CUDNN_V8_API_DISABLED": "1"}
    assert frameworks.get("tensorflow").trial_environment() == {}
    assert frameworks.get("jax").trial_environment() == {}
    before = dict(os.environ)
    try:
        use_trial_environment(RunSettings(backend="torch", gpus=1))
        assert os.environ["TORCH_CUDNN_V8_API_DISABLED"] == "1"
    finally:
        os.environ.clear()
        os.environ.update(before)
