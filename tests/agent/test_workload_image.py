"""Which workload image the agent starts: the published one of its own version, and the
torch image's tag by the GPUs' compute capability (compat.torch_image_for, the docker
runner's fit_to), and the check's advice naming the image that runs."""

from __future__ import annotations

import pytest
from test_compat import TENSORFLOW_GPU, TORCH_CU126, card

from gpubench.agent import compat
from gpubench.agent.runners.docker import LOCAL_IMAGE, REGISTRY, DockerRunner, default_image

# Blackwell cards as NVML names them, each with a driver of its generation.
RTX_5090 = compat.Gpu("NVIDIA GeForce RTX 5090", "12.0", "570.124.06", "12.8")
B200 = compat.Gpu("NVIDIA B200", "10.0", "570.124.06", "12.8")
PUBLISHED = f"{REGISTRY}/gpubench-workload:0.2.0"


def test_a_release_starts_the_published_workload_of_its_version() -> None:
    assert default_image("0.2.0") == PUBLISHED
    assert default_image("1.0.0rc1") == f"{REGISTRY}/gpubench-workload:1.0.0rc1"
    # A development copy, or one that knows no version, starts the local build.
    assert default_image("0.2.1.dev3+g1234abc") == LOCAL_IMAGE == "gpubench-workload:latest"
    assert default_image("0.0") == LOCAL_IMAGE


@pytest.mark.parametrize(("image", "variant", "expected"), [
    ("gpubench-workload:latest", "cu129", "gpubench-workload:cu129"),
    ("gpubench-workload", "cu129", "gpubench-workload:cu129"),
    (PUBLISHED, "cu129", f"{PUBLISHED}-cu129"),
    (PUBLISHED, "", PUBLISHED),
    ("localhost:5000/gpubench-workload", "cu129", "localhost:5000/gpubench-workload:cu129"),
    # From one variant to another.
    ("gpubench-workload:tensorflow", "cu129", "gpubench-workload:cu129"),
    (f"{PUBLISHED}-tensorflow", "", PUBLISHED),
    (f"{PUBLISHED}-cu129", "cu129", f"{PUBLISHED}-cu129"),
    # Not a workload image of ours: no variant of it.
    ("gpubench-workload@sha256:" + "0" * 64, "cu129", None),
    ("my-workload:latest", "cu129", None),
])
def test_the_variants_tag(image: str, variant: str, expected: str | None) -> None:
    assert compat.image_variant(image, variant) == expected


def test_a_hopper_card_runs_the_default_image() -> None:
    image, line = compat.torch_image_for(PUBLISHED, [card("h200")])
    assert image == PUBLISHED
    assert line == (f"workload image {PUBLISHED}: torch for CUDA 12.6, with kernels for the "
                    "NVIDIA H200 (compute capability 9.0)")
    # Pascal: only the CUDA 12.6 build has sm_60.
    assert compat.torch_image_for("gpubench-workload:latest", [card("gtx1070")])[0] == \
        "gpubench-workload:latest"


@pytest.mark.parametrize("gpu", [RTX_5090, B200])
def test_a_blackwell_card_runs_the_cuda_12_9_image_and_the_line_says_why(gpu) -> None:
    image, line = compat.torch_image_for("gpubench-workload:latest", [gpu])
    assert image == "gpubench-workload:cu129"
    assert line == (f"workload image gpubench-workload:cu129: torch for CUDA 12.9, with "
                    f"kernels for the {gpu.name} (compute capability "
                    f"{gpu.compute_capability}); gpubench-workload:latest's CUDA 12.6 build "
                    "has kernels up to sm_90 only")
    # The CUDA 12.9 image's build runs where the check would probe it.
    assert compat.problems(compat.TORCH_IMAGES[1][1], gpu) == []
    assert compat.problems(TORCH_CU126, gpu) != []


def test_an_image_given_otherwise_is_run_as_given() -> None:
    for image in ("gpubench-workload:tensorflow", "mine:1", f"{PUBLISHED}-cu129"):
        assert compat.torch_image_for(image, [RTX_5090]) == (image, "")
    # A card neither build has kernels for (Thor, 11.0): the check says why, later.
    thor = compat.Gpu("NVIDIA Thor", "11.0", "580.00", "13.0")
    assert compat.torch_image_for("gpubench-workload:latest", [thor]) == (
        "gpubench-workload:latest", "")


def test_the_docker_runner_fits_its_image_to_the_gpus() -> None:
    runner = DockerRunner(PUBLISHED)
    line = runner.fit_to([B200])
    assert runner.image == f"{PUBLISHED}-cu129" and runner.where.endswith("-cu129")
    assert line is not None and line.startswith(f"workload image {PUBLISHED}-cu129: ")
    assert "image gpubench-workload:cu129" in DockerRunner("gpubench-workload:cu129") \
        ._missing_image().replace("pull ", "image ")
    assert "docker/build.sh workload-cu129" in DockerRunner(f"{PUBLISHED}-cu129") \
        ._missing_image()
    assert DockerRunner(PUBLISHED)._missing_image().endswith("docker/build.sh workload)")


def test_the_check_names_the_image_that_runs_when_the_one_given_cannot() -> None:
    # The default image's probe (CUDA 12.6 torch) on a Blackwell card, as with --image.
    with pytest.raises(compat.Incompatible) as raised:
        compat.choose([RTX_5090], [TORCH_CU126], where=f"in the image {PUBLISHED}",
                      runner="docker", image=PUBLISHED)
    message = str(raised.value)
    assert "compute capability 12.0" in message
    assert (f"Run the workload image {PUBLISHED}-cu129 (--image {PUBLISHED}-cu129: torch for "
            "CUDA 12.9)") in message
    # The TensorFlow image's PTX, which a CUDA 12.4 driver cannot compile: the torch
    # image of the same version that runs is named.
    older_driver = compat.replace(RTX_5090, driver_version="550.144.03", cuda_version="12.4")
    with pytest.raises(compat.Incompatible, match="Run the workload image "
                                                  "gpubench-workload:cu129 "):
        compat.choose([older_driver], [TENSORFLOW_GPU],
                      where="in the image gpubench-workload:tensorflow", runner="docker",
                      image="gpubench-workload:tensorflow")
