"""The workload's settings: the protocol's tables, validation naming the flag."""

from __future__ import annotations

import sys

import pytest
from gpubench.agent.workload import options
from gpubench.agent.workload.options import BadSettings, RunSettings

from gpubench import record
from gpubench.errors import ExitCode


def test_tables_equal_the_run_records() -> None:
    # The workload keeps its own copy (it runs without the generated wire code).
    assert options.MODELS == record.MODELS
    assert options.PRECISIONS == record.PRECISIONS
    assert options.BACKENDS == record.BACKENDS
    assert options.PIPELINES == record.PIPELINES
    assert options.NATIVE_IMAGE_SIZE == record.NATIVE_IMAGE_SIZE


@pytest.mark.parametrize(
    ("change", "flag"),
    [
        ({"epochs": 1}, "--epochs"),
        ({"model": "B5"}, "--model"),
        ({"batch": 0}, "--batch"),
        ({"precision": "float16"}, "--precision"),
        ({"image_size": 8}, "--image-size"),
        ({"pipeline": "seed", "data_on_device": True}, "--data-on-device"),
        ({"cuda_graphs": True}, "--cuda-graphs needs --backend torch"),
        ({"cuda_graphs": True, "backend": "torch", "gpus": 0}, "--cuda-graphs needs --gpus 1"),
        ({"cuda_graphs": True, "backend": "torch", "gpus": 2}, "--cuda-graphs needs --gpus 1"),
        ({"cuda_graphs": True, "backend": "torch", "jit_compile": True}, "--jit-compile"),
        ({"cuda_graphs": True, "backend": "torch", "precision": "mixed_float16"},
         "mixed_float16"),
    ],
)
def test_bad_settings_name_their_flag(change: dict, flag: str) -> None:
    with pytest.raises(BadSettings, match=flag) as caught:
        RunSettings(**change)
    assert caught.value.exit_code == ExitCode.USAGE


def test_cuda_graphs_on_one_gpu_with_torch() -> None:
    assert RunSettings(backend="torch", cuda_graphs=True, precision="mixed_bfloat16").cuda_graphs
    # On by default where it applies: torch on one GPU, no jit, not mixed_float16.
    assert RunSettings(backend="torch").cuda_graphs
    assert RunSettings(backend="torch", precision="mixed_bfloat16").cuda_graphs
    for off in ({"gpus": 0}, {"gpus": 2}, {"jit_compile": True},
                {"precision": "mixed_float16"}, {"gpus": 0, "replicas_on_cpu": 2}):
        assert not RunSettings(backend="torch", **off).cuda_graphs, off
    assert not RunSettings(backend="tensorflow").cuda_graphs
    assert not RunSettings(backend="torch", cuda_graphs=False).cuda_graphs


def test_the_batch_rule_follows_the_batch() -> None:
    assert RunSettings().batch_rule == "steps"
    assert RunSettings(batch_rule="largest").batch_rule == "largest"
    assert RunSettings(batch=64).batch_rule == "given"
    assert RunSettings(batch=128, batch_rule="quick").batch_rule == "quick"
    with pytest.raises(BadSettings, match="--batch-rule quick needs a batch size"):
        RunSettings(batch_rule="quick")


def test_memory_limit_is_for_gpus_on_torch_and_tensorflow() -> None:
    assert RunSettings(backend="torch", memory_limit_bytes=16 << 30).memory_limit_bytes
    with pytest.raises(BadSettings, match="needs --gpus 1 or more"):
        RunSettings(backend="torch", gpus=0, memory_limit_bytes=16 << 30)
    with pytest.raises(BadSettings, match="torch or tensorflow"):
        RunSettings(backend="jax", memory_limit_bytes=16 << 30)
    with pytest.raises(BadSettings, match="at least 1 GiB"):
        RunSettings(backend="torch", memory_limit_bytes=1000)


@pytest.mark.parametrize(("text", "size"), [
    ("16GiB", 16 << 30), ("16 GB", 16 * 10**9), ("8g", 8 << 30), ("12000MiB", 12000 << 20),
    ("1.5GiB", 3 << 29), ("17179869184", 16 << 30),
])
def test_sizes(text: str, size: int) -> None:
    assert options.parse_size(text) == size


def test_a_bad_size_says_how_to_write_one() -> None:
    with pytest.raises(BadSettings, match="write e.g. 16GiB"):
        options.parse_size("16 bananas")


def test_native_size_unless_overridden() -> None:
    assert RunSettings(model="B7").size == 600
    assert RunSettings(model="B7", image_size=64).size == 64
    assert RunSettings(gpus=0).devices == 1 and RunSettings(gpus=2).devices == 2


def test_settings_and_search_import_no_framework() -> None:
    import subprocess

    code = (
        "import sys\n"
        "import gpubench.agent.workload, gpubench.agent.workload.options\n"
        "import gpubench.agent.workload.batch_search, gpubench.agent.workload.cli\n"
        "loaded = [m for m in ('keras', 'tensorflow', 'torch', 'jax') if m in sys.modules]\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
