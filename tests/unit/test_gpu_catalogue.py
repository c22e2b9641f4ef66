"""The GPU catalogue (collector/gpu_specs.json) holds together: every row's figures lie
within what its generation can do, each name NVML gives a card finds its row and no
other, and every row says where its figures come from."""

from __future__ import annotations

import re

import pytest
from factories import CARDS, MIB

from gpubench.collector import ceilings, plausibility

SPECS = ceilings.read_specs()
ROWS = SPECS.gpus
GIB = 1 << 30

# Per generation: its compute capabilities (NVIDIA's table, developer.nvidia.com/cuda-gpus),
# and the range of memory bandwidth (GB/s) and fp32 TFLOP/s its cards span, from its
# smallest card to its largest; a row outside is a typing slip (a decimal point, a
# sparse figure for a dense one, a board's figure for one GPU's).
GENERATIONS = {
    "Kepler": ({"3.7"}, (100, 400), (1, 6)),
    "Pascal": ({"6.0", "6.1"}, (40, 800), (0.5, 13)),
    "Volta": ({"7.0"}, (600, 1200), (13, 17)),
    "Turing": ({"7.5"}, (60, 700), (1, 17)),
    "Ampere": ({"8.0", "8.6", "8.7"}, (90, 2100), (2, 41)),
    "Ada Lovelace": ({"8.9"}, (100, 1100), (5, 92)),
    "Hopper": ({"9.0"}, (1900, 5000), (40, 70)),
    "Blackwell": ({"10.0", "10.3", "11.0", "12.0", "12.1"}, (200, 8200), (5, 130)),
}
# The generations with tensor cores for TF32 and bfloat16, and with 8-bit floats.
TF32_AND_BF16 = {"Ampere", "Ada Lovelace", "Hopper", "Blackwell"}
FP8 = {"Ada Lovelace", "Hopper", "Blackwell"}
# Turing cards without tensor cores (GTX 16, MX 450 and 550, T400-T1000 and the Quadro T
# laptops): fp16 at twice fp32 on the cores.
NO_TENSOR_CORES = re.compile(r"GeForce GTX 16|GeForce MX[45]50|^T\d00|^Quadro T\d000")
# The memory sizes cards are sold with (GB, as the datasheet writes it).
SOLD_SIZES = {2, 3, 4, 5, 6, 8, 11, 12, 16, 20, 24, 32, 40, 48, 64, 72, 80, 94, 96, 128, 141,
              144, 180, 186, 288}
# What NVML reports as the total memory of some cards (nvidia-smi --query-gpu=memory.total,
# MiB): the tests' factory cards, and others the project has seen. A row's memory is the
# largest size sold; NVML keeps some back, so that size reports up to 7% less, never more.
NVML_TOTAL_MIB = {
    **{card.name: card.memory_total_bytes // MIB for card in CARDS.values()},
    "NVIDIA A100-SXM4-80GB": 81920, "NVIDIA A100-SXM4-40GB": 40960,
    "NVIDIA H100 80GB HBM3": 81559, "NVIDIA H100 NVL": 95830, "NVIDIA GH200 480GB": 97871,
    "NVIDIA B200": 183359, "NVIDIA L4": 23034, "NVIDIA A10G": 23028,
    "NVIDIA GeForce RTX 4090": 24564, "NVIDIA GeForce RTX 3090": 24576,
    "Tesla V100-SXM2-32GB": 32510,
}
# Names the catalogue is asked about most: each must be known.
ASKED_FOR = [
    "NVIDIA GeForce RTX 3060", "NVIDIA GeForce RTX 4070 Laptop GPU", "NVIDIA RTX A4000",
    "NVIDIA L40", "NVIDIA A10", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    "NVIDIA B300 SXM6 AC", "GeForce GTX 1070", "NVIDIA GeForce GTX 1080 Ti",
    "NVIDIA GeForce RTX 2080 Ti", "NVIDIA GeForce RTX 5090 Laptop GPU", "Tesla P100-PCIE-16GB",
    "Tesla V100-SXM2-32GB", "Tesla T4", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe",
    "NVIDIA A16", "NVIDIA A2", "NVIDIA A30", "NVIDIA A40", "NVIDIA L40S", "NVIDIA H100 PCIe",
    "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA GH200 480GB", "NVIDIA B200",
    "NVIDIA RTX 6000 Ada Generation", "Quadro RTX 8000", "Quadro P6000", "Tesla P40", "Tesla P4",
    # ... and names the catalogue's rows knew when one row held a family of cards.
    "NVIDIA RTX A2000 Laptop GPU", "NVIDIA RTX A5000 Laptop GPU", "NVIDIA RTX A2000 12GB",
    "NVIDIA GeForce RTX 3050 Ti Laptop GPU", "GeForce GTX 1070 with Max-Q Design",
    "GeForce GTX 1070 Ti", "TITAN RTX", "NVIDIA GeForce RTX 2060 SUPER",
    "NVIDIA GeForce RTX 4060 Ti", "NVIDIA GeForce RTX 4090 D", "NVIDIA GeForce RTX 4070 Ti SUPER",
    "NVIDIA GeForce RTX 5060 Ti", "NVIDIA RTX 4000 SFF Ada Generation", "NVIDIA A100 PCIe",
    "NVIDIA A100-PCIE-40GB", "NVIDIA A800-SXM4-80GB", "NVIDIA H100 SXM5 80GB", "NVIDIA H800",
    "NVIDIA GH200 144G HBM3e", "NVIDIA GB200", "NVIDIA B300", "Tesla V100S-PCIE-32GB",
    "Tesla V100-SXM3-32GB", "Tesla P100-SXM2-16GB", "Tesla K80",
    # ... and the names of cards added since, as NVML gives them.
    "NVIDIA A100-SXM-80GB", "NVIDIA A100-SXM-64GB", "NVIDIA PG509-210", "NVIDIA H20",
    "NVIDIA L20", "NVIDIA L2", "NVIDIA A800-PCIE-40GB", "NVIDIA GB10", "Orin (nvgpu)",
    "NVIDIA Thor", "NVIDIA RTX PRO 5000 Blackwell", "NVIDIA RTX PRO 4500 Blackwell",
    "NVIDIA RTX PRO 4000 Blackwell", "NVIDIA RTX PRO 2000 Blackwell",
    "NVIDIA GeForce RTX 3050 6GB Laptop GPU", "NVIDIA GeForce RTX 3050 4GB Laptop GPU",
    "NVIDIA GeForce RTX 3050 A Laptop GPU", "NVIDIA GeForce RTX 2050", "NVIDIA GeForce MX150",
    "NVIDIA GeForce MX250", "NVIDIA GeForce MX330", "NVIDIA GeForce MX350",
    "NVIDIA GeForce MX450", "NVIDIA GeForce MX550", "NVIDIA GeForce MX570",
    "NVIDIA GeForce GTX 1630", "Quadro T1000 with Max-Q Design", "Quadro T2000 with Max-Q Design",
    "Quadro RTX 5000 with Max-Q Design", "NVIDIA RTX A500 Laptop GPU",
    "NVIDIA RTX 500 Ada Generation Laptop GPU", "NVIDIA RTX 1000 Ada Generation Laptop GPU",
    "NVIDIA GeForce RTX 5090 D v2",
]


def ids(rows: tuple[ceilings.GpuSpec, ...]) -> list[str]:
    return [row.name for row in rows]


def test_the_catalogue_holds_every_card_since_pascal() -> None:
    assert len(ROWS) >= 100
    assert len({row.name for row in ROWS}) == len(ROWS)
    for generation in GENERATIONS:
        assert any(row.architecture == generation for row in ROWS), generation
    for name in ASKED_FOR:
        assert SPECS.spec_of(name) is not None, name


@pytest.mark.parametrize("row", ROWS, ids=ids(ROWS))
def test_each_row_is_within_its_generation(row: ceilings.GpuSpec) -> None:
    capabilities, bandwidth, fp32 = GENERATIONS[row.architecture]
    assert row.compute_capability in capabilities
    assert bandwidth[0] <= row.bandwidth_gb_s <= bandwidth[1]
    assert fp32[0] <= row.fp32_tflops <= fp32[1]
    assert row.power_watts > 0 and row.memory_gib in SOLD_SIZES


@pytest.mark.parametrize("row", ROWS, ids=ids(ROWS))
def test_each_rows_precisions_are_its_generations(row: ceilings.GpuSpec) -> None:
    if row.architecture in TF32_AND_BF16:
        assert 0 < row.tf32_tflops <= row.bf16_tflops <= row.fp16_tflops
    else:
        assert row.tf32_tflops == row.bf16_tflops == 0
    if row.architecture in FP8:
        assert row.fp8_tflops >= row.fp16_tflops > 0
    else:
        assert row.fp8_tflops == 0
    if row.architecture in ("Kepler",):
        assert row.fp16_tflops == 0
    elif row.architecture == "Pascal":
        # GP100 has fp16 at twice fp32; the other Pascal chips at 1/64 of it.
        ratio = row.fp16_tflops / row.fp32_tflops
        assert ratio == pytest.approx(2, rel=0.02) if row.compute_capability == "6.0" \
            else ratio <= 1 / 32
    elif NO_TENSOR_CORES.search(row.name):
        assert row.fp16_tflops == pytest.approx(2 * row.fp32_tflops, rel=0.05)
    else:  # tensor cores: fp16 at 2x (the L40) to 32x fp32 (Jetson Thor)
        assert 2 * row.fp32_tflops * 0.99 <= row.fp16_tflops <= 32 * row.fp32_tflops


@pytest.mark.parametrize("row", ROWS, ids=ids(ROWS))
def test_each_row_says_where_it_comes_from(row: ceilings.GpuSpec) -> None:
    assert re.search(r"nvidia\.(com|cn)|aws\.amazon\.com|whitepaper", row.source), row.source
    laptop = "Laptop GPU" in row.name or row.note.startswith("laptop")
    if laptop:  # a laptop card's power varies by design: the top of its range, said so
        assert re.search(r"\d+-\d+\+? W by design, the top stored|the top stored", row.note)


@pytest.mark.parametrize("row", ROWS, ids=ids(ROWS))
def test_each_name_nvml_gives_finds_its_row_and_no_other(row: ceilings.GpuSpec) -> None:
    assert row.names, row.name
    re.compile(row.pattern)
    for name in row.names:
        assert SPECS.spec_of(name) == row, name
        others = [other.name for other in ROWS
                  if other is not row and re.fullmatch(other.pattern, name)]
        assert others == [], name


def test_no_pattern_matches_a_name_it_does_not_list_among_the_catalogues_names() -> None:
    # Every example name of every row, against every other row: names are unique.
    every = [(name, row) for row in ROWS for name in row.names]
    assert len({name for name, _ in every}) == len(every)
    for name, row in every:
        assert [r.name for r in ROWS if re.fullmatch(r.pattern, name)] == [row.name]


@pytest.mark.parametrize(("name", "mib"), sorted(NVML_TOTAL_MIB.items()))
def test_memory_is_what_nvml_reports_and_passes_its_check(name: str, mib: int) -> None:
    row = SPECS.spec_of(name)
    assert row is not None, name
    reported = mib * MIB / GIB
    assert 0.93 * row.memory_gib <= reported <= row.memory_gib, name
    # The memory check (collector.plausibility) lets the card's own figure through.
    assert reported <= row.memory_gib * plausibility.MEMORY_FACTOR


def test_a_missing_card_is_still_none() -> None:
    for name in ("NVIDIA H300", "Quantum GPU 9000", "nvidia h200",
                 "NVIDIA GeForce RTX 4070 laptop gpu"):
        assert SPECS.spec_of(name) is None, name


# Figures once wrong, each as its sheet gives it: the A10G's 80 SMs, the laptop cards that
# share a desktop card's name (held to the higher of the two), the Max-Q card's own sheet.
@pytest.mark.parametrize(("name", "fp32"), [
    ("NVIDIA A10G", 35.0), ("NVIDIA GeForce GTX 1070", 6.74), ("NVIDIA GeForce GTX 1650", 3.19),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 110),
])
def test_corrected_figures(name: str, fp32: float) -> None:
    assert SPECS.spec_of(name).fp32_tflops == fp32


@pytest.mark.parametrize(("name", "card"), [
    ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "A100 SXM4 80GB"),
    ("NVIDIA A100-SXM4-40GB MIG 7g.40gb", "A100 SXM4 40GB"),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "H100"),
    ("NVIDIA A30 MIG 1c.2g.12gb", "A30"),
])
def test_a_mig_device_is_its_card(name: str, card: str) -> None:
    assert SPECS.spec_of(name).name == card
    assert ceilings.imitated(SPECS, name) is None


@pytest.mark.parametrize(("name", "card"), [
    ("NVIDIA H2OO", "H200"), ("nvidia h200", "H200"), ("NVIDIA-H200", "H200"),
    ("NVIDIA H200X", "H200"), ("NVIDIA GeForce RTX 4O9O", "GeForce RTX 4090"),
    ("Tesla T4i", "Tesla T4"),
])
def test_a_look_alike_is_at_most_two_edits_from_a_whole_name(name: str, card: str) -> None:
    assert ceilings.imitated(SPECS, name).name == card
    assert not ceilings.not_yet_catalogued(SPECS, name)


@pytest.mark.parametrize("name", [
    "NVIDIA A100-SXM-80GB", "NVIDIA A100-SXM-64GB", "NVIDIA H20", "NVIDIA L20", "NVIDIA L2",
    "NVIDIA GB10", "NVIDIA RTX PRO 4000 Blackwell",
])
def test_real_names_once_taken_for_look_alikes_are_cards(name: str) -> None:
    assert SPECS.spec_of(name) is not None, name


@pytest.mark.parametrize("name", [
    "NVIDIA Rubin R100", "NVIDIA H200 Ultra", "Tesla T4 PCIe", "Quantum GPU 9000",
    "NVIDIA A10 Super Accelerator",
])
def test_a_catalogued_name_inside_another_is_no_look_alike(name: str) -> None:
    assert ceilings.imitated(SPECS, name) is None
    assert ceilings.not_yet_catalogued(SPECS, name)
