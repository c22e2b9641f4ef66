"""The compatibility check (gpubench.agent.compat) on the cards users named and the GPU machine.

The GPUs come from the NVML profiles in tests/data/ read through FakeNvml and the real
inventory, as the agent reads them; the builds are the one probed on the GPU machine
(tests/data/probe-h200.json) and official builds as their projects document them
(tests/data/README.md says where each value comes from).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpubench.agent import compat
from gpubench.agent.inventory import take_inventory
from gpubench.agent.nvml_replay import FakeNvml
from gpubench.errors import ExitCode

DATA = Path(__file__).resolve().parent.parent / "data"
PROFILES = {
    "gtx1070": DATA / "nvml-gtx1070-laptop.json",
    "t4": DATA / "nvml-t4-colab.json",
    "ada": DATA / "nvml-rtx6000ada.json",
    "h200": DATA / "nvml-h200-trace.json",
}

# torch 2.11.0+cu130 as the workload probed it on the GPU machine.
TORCH_CU130 = next(b for b in compat.builds_from_probe(
    json.loads((DATA / "probe-h200.json").read_text())) if b.backend == "torch")
# Official wheels' architecture lists: PyTorch's .ci/manywheel/build_cuda.sh
# (TORCH_CUDA_ARCH_LIST 12.6 "5.0;6.0;7.0;7.5;8.0;8.6;9.0", 12.8
# "7.0;7.5;8.0;8.6;9.0;10.0;12.0").
TORCH_CU126 = compat.Build("torch", "2.11.0+cu126", "12.6",
                           ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"))
TORCH_CU128 = compat.Build("torch", "2.9.0+cu128", "12.8",
                           ("sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"))
# TensorFlow's GPU build (build_info: CUDA 12.5.1, sm_60 sm_70 sm_80 sm_89 compute_90).
TENSORFLOW_GPU = compat.Build("tensorflow", "2.21.0", "12.5.1",
                              ("sm_60", "sm_70", "sm_80", "sm_89", "compute_90"))
# The CPU builds this test environment installs (what its probe reports).
TORCH_CPU = compat.Build("torch", "2.13.0+cpu")
TENSORFLOW_CPU = compat.Build("tensorflow", "2.21.0")


def card(name: str) -> compat.Gpu:
    """The GPU as the agent sees it: the profile through FakeNvml and the inventory."""
    nvml = FakeNvml.from_trace(PROFILES[name])
    [gpu] = take_inventory(nvml).gpus
    return compat.Gpu(gpu.name, gpu.compute_capability, gpu.driver_version, gpu.cuda_version)


def test_the_profiles_say_what_the_cards_are() -> None:
    assert card("gtx1070") == compat.Gpu("NVIDIA GeForce GTX 1070", "6.1", "535.183.01", "12.2")
    assert card("t4") == compat.Gpu("Tesla T4", "7.5", "525.85.12", "12.0")
    assert card("ada") == compat.Gpu("NVIDIA RTX 6000 Ada Generation", "8.9", "535.161.07",
                                     "12.2")
    assert card("h200") == compat.Gpu("NVIDIA H200", "9.0", "580.159.04", "13.0")


def test_the_gpu_machine_build_was_probed_as_a_cuda_13_build() -> None:
    assert TORCH_CU130.version == "2.11.0+cu130" and TORCH_CU130.cuda == "13.0"
    assert "sm_90" in TORCH_CU130.archs and "sm_61" not in TORCH_CU130.archs
    assert min(compat.parse_arch(a).capability for a in TORCH_CU130.archs) == (7, 5)


@pytest.mark.parametrize(("arch", "capability", "runs"), [
    ("sm_86", (8, 9), True),  # machine code: same major, equal or higher minor
    ("sm_86", (8, 0), False),
    ("sm_86", (9, 0), False),  # never across a major
    ("sm_60", (6, 1), True),
    ("sm_90a", (9, 0), True),  # arch-specific: that GPU only
    ("sm_90a", (10, 0), False),
    ("sm_100f", (10, 3), True),  # family code: the family from 10.0
    ("sm_100f", (12, 0), False),
    ("compute_90", (12, 0), True),  # PTX: compiled by the driver for newer GPUs
    ("compute_90", (8, 9), False),  # ... never older ones
    ("8.6", (8, 9), True),  # TensorFlow's X.Y: machine code and PTX
    ("8.6", (9, 0), True),
])
def test_which_code_runs_on_which_gpu(arch: str, capability: tuple[int, int],
                                      runs: bool) -> None:
    assert compat.parse_arch(arch).runs_on(capability) is runs


EXPECTED = {
    # card: {build: a phrase of each reason it cannot run, or [] when it can}
    "gtx1070": {
        TORCH_CU130: ["NVIDIA GeForce GTX 1070 is compute capability 6.1; torch 2.11.0+cu130 "
                      "has kernels for sm_75 and newer",
                      "driver 535.183.01 runs CUDA 12.2 at most; torch 2.11.0+cu130 needs "
                      "CUDA 13"],
        TORCH_CU126: [],
        TORCH_CU128: ["torch 2.9.0+cu128 has kernels for sm_70 and newer"],
        TENSORFLOW_GPU: [],
        TORCH_CPU: ["torch 2.13.0+cpu is built without CUDA"],
    },
    "t4": {
        TORCH_CU130: ["driver 525.85.12 runs CUDA 12.0 at most; torch 2.11.0+cu130 needs "
                      "CUDA 13"],
        TORCH_CU126: [], TORCH_CU128: [], TENSORFLOW_GPU: [],
        TENSORFLOW_CPU: ["tensorflow 2.21.0 is built without CUDA"],
    },
    "ada": {
        TORCH_CU130: ["driver 535.161.07 runs CUDA 12.2 at most"],
        TORCH_CU126: [], TORCH_CU128: [], TENSORFLOW_GPU: [],
    },
    "h200": {
        TORCH_CU130: [], TORCH_CU126: [], TORCH_CU128: [], TENSORFLOW_GPU: [],
        TORCH_CPU: ["built without CUDA"],
    },
}


@pytest.mark.parametrize(("name", "build", "reasons"), [
    (name, build, reasons) for name, builds in EXPECTED.items()
    for build, reasons in builds.items()
], ids=lambda value: getattr(value, "label", None))
def test_each_build_on_each_card(name: str, build: compat.Build, reasons: list[str]) -> None:
    found = compat.problems(build, card(name))
    assert len(found) == len(reasons), found
    for reason, text in zip(reasons, found, strict=True):
        assert reason in text


def test_how_the_chosen_build_runs_is_said() -> None:
    assert "sm_90 kernels" in compat.choose([card("h200")], [TORCH_CU130]).line
    on_ada = compat.choose([card("ada")], [TORCH_CU126]).line
    assert "sm_86 kernels run on 8.9" in on_ada
    assert "CUDA 12.6 on the driver's CUDA 12.2 (minor version compatibility)" in on_ada
    # TensorFlow has no machine code for Hopper: the driver compiles its PTX.
    on_h200 = compat.choose([card("h200")], [TENSORFLOW_GPU], asked="tensorflow").line
    assert on_h200.startswith("backend tensorflow (--backend): tensorflow 2.21.0 (CUDA 12.5.1)")
    assert "compute_90 PTX, compiled for 9.0 by the driver" in on_h200


def test_torch_first_when_it_runs() -> None:
    choice = compat.choose([card("h200")], [TENSORFLOW_GPU, TORCH_CU130])
    assert choice.backend == "torch" and choice.build == TORCH_CU130
    assert choice.line == ("backend torch: torch 2.11.0+cu130 runs on the NVIDIA H200 "
                           "(sm_90 kernels)")


def test_on_the_colab_t4_tensorflow_is_chosen_and_the_line_says_why_not_torch() -> None:
    choice = compat.choose([card("t4")], [TORCH_CU130, TENSORFLOW_GPU])
    assert choice.backend == "tensorflow"
    assert "sm_70 kernels run on 7.5" in choice.line
    assert ("; not torch: driver 525.85.12 runs CUDA 12.0 at most; torch "
            "2.11.0+cu130 needs CUDA 13. Note: TensorFlow on a GPU has not been run by "
            "gpubench itself") in choice.line


def test_the_gtx_1070_with_the_gpu_machine_build_stops_with_what_to_install() -> None:
    with pytest.raises(compat.Incompatible) as caught:
        compat.choose([card("gtx1070")], [TORCH_CU130])
    message = str(caught.value)
    assert caught.value.exit_code == ExitCode.USAGE == 2
    assert message.startswith("no backend installed in the workload's Python runs on the "
                              "NVIDIA GeForce GTX 1070: ")
    assert "is compute capability 6.1; torch 2.11.0+cu130 has kernels for sm_75 and newer" \
        in message
    assert "driver 535.183.01 runs CUDA 12.2 at most; torch 2.11.0+cu130 needs CUDA 13" \
        in message
    assert ("Install a torch build for CUDA 12.6 (`pip install torch --index-url "
            "https://download.pytorch.org/whl/cu126`), or run the TensorFlow workload image "
            "(--runner docker: TensorFlow 2.21.0 with CUDA 12.5.1); or train on the CPU with "
            "--gpus 0.") in message


def test_cpu_builds_with_a_gpu_present_are_said_plainly() -> None:
    with pytest.raises(compat.Incompatible, match="tensorflow 2.21.0 is built without CUDA "
                                                  r"\(a CPU build\)"):
        compat.choose([card("t4")], [TORCH_CPU, TENSORFLOW_CPU])


def test_what_was_asked_is_checked_and_not_replaced() -> None:
    with pytest.raises(compat.Incompatible, match="^KERAS_BACKEND=torch torch cannot run on "
                                                  "the Tesla T4: driver 525.85.12"):
        compat.choose([card("t4")], [TORCH_CU130, TENSORFLOW_GPU], asked="torch",
                      asked_by="KERAS_BACKEND=torch")
    with pytest.raises(compat.Incompatible, match="^--backend jax: jax is not installed in "
                                                  "the image gpubench-workload:latest"):
        compat.choose([card("t4")], [TENSORFLOW_GPU], asked="jax",
                      where="in the image gpubench-workload:latest", runner="docker")


def test_the_advice_fits_the_card_and_the_driver() -> None:
    assert "whl/cu130" in compat.advice([card("h200")])  # the newest that runs
    assert "whl/cu126" in compat.advice([card("t4")])  # a CUDA 12 driver
    assert "whl/cu126" in compat.advice([card("gtx1070")])  # Pascal: only cu126 has sm_60
    blackwell = compat.Gpu("NVIDIA GeForce RTX 5090", "12.0", "570.124.06", "12.8")
    assert "whl/cu129" in compat.advice([blackwell])  # cu126 has nothing for 12.0
    # Under docker the image's TensorFlow is what failed: torch is offered with the local
    # runner, the image is not offered again.
    docker = compat.advice([card("gtx1070")], runner="docker")
    assert "--runner local" in docker and "workload image" not in docker
    old_driver = compat.Gpu("Tesla T4", "7.5", "470.82.01", "11.4")
    assert compat.advice([old_driver]).startswith(
        "Install a newer NVIDIA driver (driver 470.82.01 runs CUDA 11.4; CUDA 12 builds need "
        "525 or newer")
    kepler = compat.Gpu("Tesla K80", "3.7", "470.82.01", "11.4")
    assert "no official torch or TensorFlow build has kernels for compute capability 3.7" in \
        compat.advice([kepler])


def test_ptx_needs_a_driver_as_new_as_the_cuda_that_wrote_it() -> None:
    # TensorFlow has no machine code for Blackwell (12.0), only compute_90 PTX from CUDA
    # 12.5.1. A CUDA 12.4 driver runs that CUDA (minor version compatibility) but cannot
    # compile its PTX; a CUDA 12.8 driver can.
    older = compat.Gpu("NVIDIA GeForce RTX 5090", "12.0", "550.144.03", "12.4")
    newer = compat.Gpu("NVIDIA GeForce RTX 5090", "12.0", "570.124.06", "12.8")
    [reason] = compat.problems(TENSORFLOW_GPU, older)
    assert "only compute_90 PTX, which driver 550.144.03 (CUDA 12.4) cannot compile" in reason
    assert compat.problems(TENSORFLOW_GPU, newer) == []


def test_jax_plugins_by_their_documented_lowest_capability() -> None:
    cuda13 = compat.Build("jax", "0.11.2", "13", plugin="jax-cuda13-plugin 0.11.2")
    cuda12 = compat.Build("jax", "0.11.2", "12", plugin="jax-cuda12-plugin 0.11.2")
    assert compat.problems(cuda13, card("h200")) == []
    assert compat.problems(cuda12, card("gtx1070")) == []
    reasons = compat.problems(cuda13, card("gtx1070"))
    assert reasons == [
        "NVIDIA GeForce GTX 1070 is compute capability 6.1; jax 0.11.2 (CUDA 13) runs on "
        "compute capability 7.5 and newer",
        "driver 535.183.01 runs CUDA 12.2 at most; jax 0.11.2 (CUDA 13) needs CUDA 13"]


def test_jax_on_a_gpu_says_its_first_epoch_compiles() -> None:
    cuda13 = compat.Build("jax", "0.11.2", "13", plugin="jax-cuda13-plugin 0.11.2")
    choice = compat.choose([card("h200")], [cuda13], asked="jax")
    assert choice.backend == "jax"
    assert choice.line.endswith(f"Note: {compat.GPU_NOTES['jax']}")
    assert "compiles the training step in epoch 1" in choice.line
    assert "h200-jax.md" in choice.line and "not been timed" not in choice.line


def test_every_gpu_of_the_run_is_checked() -> None:
    with pytest.raises(compat.Incompatible, match="runs on the NVIDIA H200 and Tesla T4: "
                                                  "driver 525.85.12 runs CUDA 12.0 at most"):
        compat.choose([card("h200"), card("t4")], [TORCH_CU130])


def test_the_probe_answer_is_read_from_the_last_json_line() -> None:
    answer = (DATA / "probe-h200.json").read_text()
    text = "a banner a framework printed\n" + json.dumps(json.loads(answer)) + "\n"
    assert [b.backend for b in compat.parse_probe_output(text)][0] == "torch"
    with pytest.raises(ValueError, match="no JSON object"):
        compat.parse_probe_output("Usage: ... No such command 'probe'.")
    with pytest.raises(ValueError, match="not a gpubench-probe answer"):
        compat.parse_probe_output('{"event": "started"}')
