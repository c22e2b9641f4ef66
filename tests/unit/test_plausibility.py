"""Plausibility: the GPU table is sound data, every real run in docs/results passes every
check, and the ceilings and tolerances catch what they say they catch."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from factories import make_run

from gpubench import record
from gpubench.collector import ceilings, plausibility

ROOT = Path(__file__).resolve().parents[2]


def _records() -> list[tuple[str, dict]]:
    """Every run record the project measured or transcribed: docs/results/**/*.json holding
    a record, or a list of them (the agent's --json), named by file and position."""
    found = []
    for path in sorted((ROOT / "docs" / "results").rglob("*.json")):
        data = json.loads(path.read_text())
        items = data if isinstance(data, list) else [data]
        for i, item in enumerate(items):
            if isinstance(item, dict) and "schema_version" in item and "result" in item:
                name = str(path.relative_to(ROOT)) + (f"[{i}]" if isinstance(data, list) else "")
                found.append((name, item))
    return found


RECORDS = _records()


def test_there_are_real_records_to_hold_the_checks_to() -> None:
    assert len(RECORDS) >= 40


@pytest.mark.parametrize("data", [d for _, d in RECORDS], ids=[n for n, _ in RECORDS])
def test_every_real_run_is_consistent_and_plausible(data: dict) -> None:
    run = record.from_dict(data)
    assert plausibility.inconsistencies(run) == []
    assert plausibility.implausibilities(run) == []


def test_the_table_reads_and_every_pattern_compiles() -> None:
    specs = ceilings.read_specs()
    assert len(specs.gpus) >= 15
    for spec in specs.gpus:
        re.compile(spec.pattern)
        assert spec.fp32_tflops > 0 and spec.bandwidth_gb_s > 0 and spec.memory_gib > 0
    names = {"Tesla T4": "Tesla T4", "NVIDIA H200": "H200",
             "NVIDIA A100-SXM4-80GB": "A100 SXM4 80GB",
             "NVIDIA GeForce GTX 1070": "GeForce GTX 1070", "NVIDIA L4": "L4",
             "NVIDIA RTX 6000 Ada Generation": "RTX 6000 Ada Generation",
             "NVIDIA H100 80GB HBM3": "H100", "NVIDIA GeForce RTX 4090": "GeForce RTX 4090"}
    for name, row in names.items():
        assert specs.spec_of(name).name == row, name
    assert specs.spec_of("Quantum GPU 9000") is None
    assert specs.unknown.bandwidth_gb_s == max(g.bandwidth_gb_s for g in specs.gpus)


def test_a_broken_table_is_refused_with_its_file(tmp_path: Path) -> None:
    data = json.loads(ceilings.SPECS_FILE.read_text())
    data["verified"].append({"gpu": "H900", "model": "B0", "settings": "keras",
                             "precision": "float32", "batch_rule": "steps",
                             "images_per_second": 1, "record": "x"})
    broken = tmp_path / "specs.json"
    broken.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="specs.json: verified run of H900 B0"):
        ceilings.read_specs(broken)


def test_every_verified_figure_is_its_records() -> None:
    for verified in ceilings.specs().verified:
        path, _, position = verified.record.partition("[")
        data = json.loads((ROOT / path).read_text())
        run = record.from_dict(data[int(position.rstrip("]"))] if position else data)
        assert run.config.model == verified.model
        assert ceilings.specs().spec_of(run.gpus[0].name).name == verified.gpu
        assert record.settings_label(run.config) == verified.settings
        assert run.config.precision == verified.precision
        assert record.batch_rule(run.config) == verified.batch_rule
        assert round(plausibility.claimed_rate(run)) == verified.images_per_second


def test_every_verified_run_is_the_fastest_real_run_of_its_configuration() -> None:
    # Of the EfficientNets and the built-in transformers at their native size (the
    # EfficientNets' pure-Keras runs are early ones: ceilings.py's `verified_about`).
    specs = ceilings.specs()
    fastest: dict[tuple, float] = {}
    for _, data in RECORDS:
        run = record.from_dict(data)
        cfg = run.config
        if (run.published or cfg.gpu_count != 1 or run.result.status != 1
                or cfg.model not in (*specs.models, *ceilings.COMPUTE)
                or plausibility.pixels(cfg) != 1):
            continue
        key = (specs.spec_of(record.normalize_gpu_name(run.gpus[0].name)).name, cfg.model,
               record.settings_label(cfg), cfg.precision, record.batch_rule(cfg))
        fastest[key] = max(fastest.get(key, 0), round(plausibility.claimed_rate(run)))
    table = {(v.gpu, v.model, v.settings, v.precision, v.batch_rule):
             v.images_per_second for v in specs.verified}
    assert table == {key: rate for key, rate in fastest.items()
                     if key[2] != "keras" or key[1] in ceilings.COMPUTE}


def test_every_card_has_its_compute_capability_and_source() -> None:
    # Each against its generation: tests/unit/test_gpu_catalogue.py.
    for spec in ceilings.specs().gpus:
        assert re.fullmatch(r"\d+\.\d", spec.compute_capability), spec.name
        assert spec.source, spec.name


# The catalogue without its verified runs: a card held to its peaks alone, as a model
# that no card has verified runs of is.
PEAKS_ONLY = ceilings.Specs(ceilings.specs().gpus, ceilings.specs().models, ())


def test_the_peak_ceilings_of_a_t4_running_b0() -> None:
    # 8.1 TFLOP/s / 2.3 GFLOP = 3,522 img/s; 320 GB/s / (101.8 MB / 2) = 6,287 img/s.
    just_under = make_run(gpu_name="Tesla T4", train_images_per_second=3500.0,
                          epoch2_seconds=1709 / 3500.0 / 0.82)
    assert plausibility.implausibilities(just_under, PEAKS_ONLY) == []
    over = make_run(gpu_name="Tesla T4", train_images_per_second=3600.0,
                    epoch2_seconds=1709 / 3600.0 / 0.82)
    [reason] = plausibility.implausibilities(over, PEAKS_ONLY)
    assert reason.startswith("B0 at 3,600 training images/s is more than 1x Tesla T4 can "
                             "compute (8 TFLOP/s at 2.3 GFLOP an image: at most 3,522 img/s)")


def test_a_smaller_image_is_held_to_a_ceiling_as_much_higher() -> None:
    # At 112 px an image costs a quarter: four times the 224 px ceilings.
    smoke = make_run(gpu_name="Tesla T4", image_size=112, train_images_per_second=12_000.0,
                     epoch2_seconds=1709 / 12_000.0 / 0.82)
    assert plausibility.implausibilities(smoke, PEAKS_ONLY) == []
    expected = ceilings.specs().expectation(ceilings.specs().card("Tesla T4"), "B0", "keras",
                                            "float32", "given")
    rate = 4 * expected.ceiling * 0.95
    assert plausibility.implausibilities(make_run(
        gpu_name="Tesla T4", image_size=112, train_images_per_second=rate,
        epoch2_seconds=1709 / rate / 0.82)) == []


def test_mixed_precision_may_use_the_tensor_cores() -> None:
    # A T4 has 65 TFLOP/s in fp16 but 8.1 in fp32: 5,000 img/s only under mixed precision.
    fast = dict(train_images_per_second=5000.0, epoch2_seconds=1709 / 5000.0 / 0.82)
    assert plausibility.implausibilities(make_run(gpu_name="Tesla T4", **fast), PEAKS_ONLY)
    assert plausibility.implausibilities(
        make_run(gpu_name="Tesla T4", precision="mixed_float16", **fast), PEAKS_ONLY) == []


def test_a_card_without_verified_runs_is_held_to_the_nearest_verified_card_s_scaled() -> None:
    # A T4 against the H100's default B0 run (2,359 img/s; the H100 is nearer the T4 than
    # the H200): the geometric mean of their bandwidth (320 / 3,350 GB/s) and fp32 (8.1 /
    # 67 TFLOP/s) ratios, 0.107: 254 img/s expected, 2.5x that (1.25 for the
    # configuration, 2 for the card) at most.
    specs = ceilings.specs()
    expected = specs.expectation(specs.card("Tesla T4"), "B0", "kernels+cuda-graphs",
                                 "float32", "steps")
    assert expected.verified.gpu == "H100" and expected.verified.images_per_second == 2359
    assert expected.scale == pytest.approx(((320 / 3350) * (8.1 / 67)) ** 0.5)
    assert expected.margin == ceilings.SAME_CONFIGURATION_MARGIN * ceilings.CARD_MARGIN
    base = record.from_dict(json.loads(
        (ROOT / "docs/results/runs/h200-b0-default.json").read_text()))

    def on_a_t4(rate: float) -> object:
        run = type(base)()
        run.CopyFrom(base)
        run.gpus[0].name, run.gpus[0].memory_total_bytes = "Tesla T4", 15 << 30
        run.gpus[0].power_limit_watts = 70.0
        factor = rate / plausibility.claimed_rate(base)
        for epoch in run.result.epochs:
            for name in ("wall_seconds", "train_seconds", "validation_seconds"):
                setattr(epoch, name, getattr(epoch, name) / factor)
            epoch.energy_joules = epoch.mean_power_watts = epoch.max_power_watts = 0.0
        res = run.result
        res.energy_per_epoch_joules = res.mean_power_watts = res.max_power_watts = 0.0
        res.epoch2_seconds /= factor
        res.startup_seconds /= factor
        res.step_time_median_seconds /= factor
        res.train_images_per_second *= factor
        return run

    assert plausibility.implausibilities(on_a_t4(expected.ceiling * 0.98)) == []
    [reason] = plausibility.implausibilities(on_a_t4(expected.ceiling * 1.02))
    assert f"more than the {expected.ceiling:,.0f} img/s 1x Tesla T4 may reach: 2.5x the " \
           f"{expected.rate:,.0f} img/s expected of it, the verified H100 run of " \
           "kernels+cuda-graphs, float32, batch rule steps (2,359 img/s a GPU, " \
           "docs/results/transformers-h100/h100-b0-default.json) scaled by 0.107" in reason


def test_the_transformers_scale_with_their_precision_s_compute() -> None:
    specs = ceilings.specs()
    lm = specs.expectation(specs.card("A100 SXM4 80GB"), "GPT2-small", "cuda-graphs",
                           "mixed_bfloat16", "steps")
    # The H100's bfloat16 run (its batch given: the same precision, another batch rule)
    # scaled by the bf16 tensor cores (312 / 989.4).
    assert (lm.verified.gpu, lm.verified.precision) == ("H100", "mixed_bfloat16")
    assert lm.scale == pytest.approx(312 / 989.4)
    assert lm.margin == ceilings.SAME_PRECISION_MARGIN * ceilings.CARD_MARGIN
    # A card without bfloat16 units trains it on its fp32 cores: held to their ratio.
    old = specs.expectation(specs.card("GeForce GTX 1070"), "GPT2-small", "cuda-graphs",
                            "mixed_bfloat16", "steps")
    assert old.scale == pytest.approx(6.74 / 67)
    # The H200 has its own float32 run only: a bfloat16 run is held to it times what its
    # bf16 units gain over its float32 ones (989.4 / 494.7), with the widest margin.
    own = specs.expectation(specs.card("H200"), "GPT2-small", "cuda-graphs",
                            "mixed_bfloat16", "steps")
    assert (own.verified.gpu, own.verified.precision) == ("H200", "float32")
    assert own.scale == pytest.approx(2.0) and own.rate == pytest.approx(2 * 39_755)
    assert own.margin == ceilings.VERIFIED_MARGIN
    # The other way, a float32 run is held to a faster precision's run as it is.
    assert ceilings.precision_gain("GPT2-small", specs.card("H200"), "mixed_bfloat16",
                                   "float32") == 1.0
    # A user's own model: no card has verified runs of it, nothing is expected.
    assert specs.expectation(specs.card("Tesla T4"), "ConvNeXtTiny", "keras", "float32",
                             "steps") is None


def test_no_card_precision_or_model_is_held_to_more_than_3x_its_expectation() -> None:
    """Every catalogued card, built-in network, precision and configuration: the ceiling
    is at most three times what the card is expected to reach."""
    specs = ceilings.specs()
    configurations = (("kernels+cuda-graphs", "steps"), ("keras", "given"),
                      ("cuda-graphs", "largest"))
    for spec in specs.gpus:
        for model in ("B0", "B3", "B7", "ViT-B16", "GPT2-small"):
            for precision in ("float32", "mixed_float16", "mixed_bfloat16"):
                for settings, rule in configurations:
                    expected = specs.expectation(spec, model, settings, precision, rule)
                    assert expected is not None and expected.margin <= 3.0, \
                        (spec.name, model, precision, settings, rule, expected)


def test_a_float16_run_is_held_to_the_bfloat16_runs() -> None:
    # No card has a verified mixed_float16 run: the same 16-bit tensor cores and half the
    # bytes of bfloat16 (precision_family), so the verified bfloat16 runs hold it.
    specs = ceilings.specs()
    t4 = specs.expectation(specs.card("Tesla T4"), "B0", "keras", "mixed_float16", "given")
    assert t4.verified.precision == "mixed_bfloat16"
    assert t4.margin == ceilings.SAME_PRECISION_MARGIN * ceilings.CARD_MARGIN
    own = specs.expectation(specs.card("H200"), "B0", "keras", "mixed_float16", "given")
    assert (own.verified.gpu, own.verified.images_per_second) == ("H200", 3941)
    assert own.margin == ceilings.SAME_PRECISION_MARGIN
    assert ceilings.precision_family("mixed_float16") == \
        ceilings.precision_family("mixed_bfloat16") != ceilings.precision_family("float32")


def test_two_cards_are_held_to_twice_one() -> None:
    # The factory's run (keras, float32, batch rule "given"): no verified run of its
    # settings, so the fastest float32 run (3,425 img/s, compiled JAX) with SAME_PRECISION_MARGIN.
    rate = 2 * 3425 * ceilings.SAME_PRECISION_MARGIN * 0.9
    run = make_run(gpu_name="NVIDIA H200", gpu_count=2, train_images_per_second=rate,
                   epoch2_seconds=1709 / rate / 0.82)
    assert plausibility.implausibilities(run) == []
    one = make_run(gpu_name="NVIDIA H200", train_images_per_second=rate,
                   epoch2_seconds=1709 / rate / 0.82)
    assert "fastest verified" in plausibility.implausibilities(one)[0]


def test_a_run_that_is_not_ok_claims_no_speed() -> None:
    assert plausibility.implausibilities(make_run(gpu_name="Tesla T4", status="error")) == []


def test_the_step_checks_hold_epochs_of_enough_steps_only() -> None:
    # The measured epoch's training part is 0.82 x epoch 2; images/s 3.5x what the
    # training images over that time give: a first step that took most of the epoch.
    def run(train_images: int, batch: int) -> object:
        return make_run(gpu_name="Tesla T4", batch_per_gpu=batch, epoch2_seconds=10.0,
                        train_images_per_second=3.5 * train_images / 8.2,
                        config__train_images=train_images,
                        result__step_time_median_seconds=8.2 / 3.5 * batch / train_images)
    # 2 full steps (a small CPU run): neither step check applies.
    assert plausibility.inconsistencies(run(256, 128)) == []
    # 13 full steps: images/s 3.5x apart is a contradiction, named.
    fields = [field for field, _ in plausibility.inconsistencies(run(1709, 128))]
    assert fields == ["run.result.train_images_per_second"]


def test_a_cpu_run_is_held_to_its_cores() -> None:
    # 32 cores x 256 GFLOP/s / 2.3 GFLOP an image: 3,562 img/s at most.
    honest = make_run(gpu_count=0)
    assert plausibility.implausibilities(honest) == []
    fast = make_run(gpu_count=0, train_images_per_second=4000.0,
                    epoch2_seconds=1709 / 4000.0 / 0.82)
    [reason] = plausibility.implausibilities(fast)
    assert reason.startswith("B0 at 4,000 training images/s on the CPU is more than 32 cores "
                             "can compute (256 GFLOP/s a core")
    many = make_run(gpu_count=0, host__cpu_cores=5000)
    assert plausibility.implausibilities(many)[0].startswith("a host of 5,000 CPU cores")


def test_a_language_model_s_rate_counts_its_tokens() -> None:
    # GPT2-small on the H200 (docs/results/h200-models/final): 205 sequences of 1,024
    # tokens in an epoch whose training took 5.28 s: 39,742 tok/s is consistent.
    def run(rate: float, spec: str = "tokens 1024 of 50257") -> object:
        return make_run(gpu_name="NVIDIA H200", batch_per_gpu=16, epoch2_seconds=5.9,
                        train_images_per_second=rate, config__train_images=205,
                        config__unit="tokens", config__input_spec=spec,
                        result__step_time_median_seconds=0.0)
    assert [f for f, _ in plausibility.inconsistencies(run(39_742.0))
            if f.endswith("per_second")] == []
    # The same rate read as sequences a second is 1,024x off, and named in tokens.
    found = dict(plausibility.inconsistencies(run(38.8)))
    assert "tok/s" in found["run.result.train_images_per_second"]
    assert "sequences of 1024 tokens" in found["run.result.train_images_per_second"]
    # A tokens spec that says no length is refused, naming the field.
    assert "run.config.input_spec" in dict(plausibility.inconsistencies(run(39_742.0, "tokens")))


def _bench(name: str):
    """bench/NAME.py as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _margins_bench():
    """bench/plausibility_margins.py, where the pairs of cards measured alike are."""
    return _bench("plausibility_margins")


def test_the_table_of_expectations_is_current() -> None:
    bench = _bench("expectations_table")
    assert bench.TABLE.read_text() == bench.table(), \
        "docs/results/expectations.md: run .venv/bin/python bench/expectations_table.py"
    rows = [line for line in bench.TABLE.read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| card")]
    assert len(rows) == len(ceilings.specs().gpus)


def test_the_card_margin_holds_every_pair_of_cards_measured_alike() -> None:
    bench = _margins_bench()
    rows = bench.landings()
    assert len(rows) >= 20
    landed = [found["mix"] for _, _, found in rows]
    # Every real card within the margin of what the scaling expects of it, and the
    # scaling the closest of the three to what they did.
    assert max(landed) <= ceilings.CARD_MARGIN
    spread = {rule: max(max(f[rule], 1 / f[rule]) for _, _, f in rows) for rule in bench.RULES}
    assert spread["mix"] == min(spread.values())
