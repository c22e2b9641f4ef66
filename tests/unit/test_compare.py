"""The comparison's arithmetic over per-group figures, against hand-computed values."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpubench import comparison_key
from gpubench.collector import compare
from gpubench.collector.compare import GroupFigures
from gpubench.collector.errors import MixedRuns
from gpubench.errors import NotFound

GIB = 1 << 30


def group(name: str, count: int, median: float, **fields: object) -> GroupFigures:
    base = GroupFigures(
        gpu_name=name, gpu_count=count, runs=5, outliers_excluded=0,
        epoch2_median_seconds=median, epoch2_min_seconds=median * 0.98,
        epoch2_max_seconds=median * 1.02, train_images_per_second_median=1709 / (median * 0.8),
        max_batch_per_gpu=128, max_global_batch=128 * count,
        peak_memory_median_bytes=12 * GIB, memory_total_bytes=16 * GIB,
        energy_per_epoch_median_joules=70.0 * median, images_per_joule_median=1709 / (70 * median),
    )
    return with_values(base, benchmark_version=("1",), backend=("tensorflow",),
                       precision=("float32",), image_size=(600,), train_images=(1709,),
                       settings=("keras",), **fields)


def with_values(g: GroupFigures, **fields: object) -> GroupFigures:
    """`g` with other fields: a dimension of the comparison key (by name) sets its values."""
    values = {name: v for name, v in fields.items() if name in comparison_key.NAMES}
    others = {name: v for name, v in fields.items() if name not in values}
    return replace(g, values={**g.values, **values}, **others)


# The article's B7 figures: GTX 1070 about 15 min an epoch, T4 678 s, 2x RTX 6000 Ada ~82 s.
GTX = group("NVIDIA GeForce GTX 1070", 1, 905.0)
T4 = group("Tesla T4", 1, 678.0)
ADA2 = group("NVIDIA RTX 6000 Ada Generation", 2, 82.0)


def test_speedup_against_the_slowest_group_by_default() -> None:
    result = compare.compare("B7", [T4, ADA2, GTX])
    assert result.baseline == "1x NVIDIA GeForce GTX 1070"
    assert [g.figures.config_name for g in result.groups] == [
        "2x NVIDIA RTX 6000 Ada Generation", "1x Tesla T4", "1x NVIDIA GeForce GTX 1070",
    ]
    speedups = [g.speedup for g in result.groups]
    assert speedups == pytest.approx([905 / 82, 905 / 678, 1.0])
    assert speedups[0] == pytest.approx(11.04, abs=0.01)  # the article's "11x faster"
    assert [g.is_baseline for g in result.groups] == [False, False, True]


def test_a_named_baseline_is_matched_case_insensitively_with_count_one_by_default() -> None:
    result = compare.compare("B7", [T4, ADA2, GTX], baseline_gpu="tesla t4")
    assert result.baseline == "1x Tesla T4"
    by_name = {g.figures.gpu_name: g.speedup for g in result.groups}
    assert by_name["NVIDIA GeForce GTX 1070"] == pytest.approx(678 / 905)
    assert by_name["NVIDIA RTX 6000 Ada Generation"] == pytest.approx(678 / 82)


def test_a_missing_baseline_names_what_there_is() -> None:
    with pytest.raises(NotFound, match=r"baseline_gpu \(--baseline\): no runs of 2x Tesla T4 "
                       r".*found: 1x NVIDIA GeForce GTX 1070, 1x Tesla T4"):
        compare.compare("B7", [T4, GTX], baseline_gpu="Tesla T4", baseline_gpu_count=2)


def test_memory_share_is_the_median_peak_over_the_card() -> None:
    result = compare.compare("B7", [replace(T4, peak_memory_median_bytes=9.88e9,
                                            memory_total_bytes=15360 * 2**20)])
    assert result.groups[0].peak_memory_share == pytest.approx(9.88e9 / 16106127360)
    assert compare.memory_share(replace(T4, peak_memory_median_bytes=None)) is None
    assert compare.memory_share(replace(T4, peak_memory_median_bytes=3 * GIB,
                                        memory_total_bytes=0)) is None
    assert compare.memory_share(replace(T4, peak_memory_median_bytes=4 * GIB,
                                        memory_total_bytes=16 * GIB)) == 0.25


def test_memory_share_of_a_limited_run_is_of_its_limit() -> None:
    # An H200 run as a 16 GiB card: 13.2 GiB is 83% of the limit, not 9% of the card.
    limited = replace(T4, gpu_name="NVIDIA H200", memory_limit_bytes=16 * GIB,
                      peak_memory_median_bytes=13.2 * GIB, memory_total_bytes=140.4 * GIB)
    [group] = compare.compare("B7", [limited]).groups
    assert group.peak_memory_share == pytest.approx(13.2 / 16)


def test_unlike_groups_say_how_each_ran() -> None:
    one = with_values(T4, gpu_name="NVIDIA H200", settings=("kernels+cuda-graphs",))
    two = with_values(T4, gpu_name="NVIDIA H200", gpu_count=2, settings=("kernels",))
    result = compare.compare("B7", [one, two], allow_mixed=True)
    assert {g.figures.gpu_count: g.differences for g in result.groups} == {
        1: ("settings kernels+cuda-graphs",), 2: ("settings kernels",)}
    alike = compare.compare("B7", [one, replace(one, gpu_name="Tesla T4")])
    assert all(g.differences == () for g in alike.groups)


def test_mixed_settings_are_refused_naming_the_dimension_and_values() -> None:
    torch_t4 = with_values(T4, backend=("torch",))
    with pytest.raises(MixedRuns) as caught:
        compare.compare("B7", [torch_t4, GTX])
    message = str(caught.value)
    assert "backend (tensorflow, torch; pin one with --backend)" in message
    assert "precision" not in message


def test_several_mixed_dimensions_are_all_named() -> None:
    odd = with_values(T4, precision=("float32", "mixed_float16"), image_size=(300, 600),
                  benchmark_version=("1", "2"))
    with pytest.raises(MixedRuns) as caught:
        compare.compare("B7", [odd, GTX])
    message = str(caught.value)
    for words in ("benchmark_version (1, 2;", "precision (float32, mixed_float16;",
                  "image_size (300, 600;"):
        assert words in message


def test_a_smoke_run_data_set_is_refused_naming_train_images() -> None:
    smoke = with_values(T4, train_images=(192,))  # gpubench-agent run --limit-images 240
    with pytest.raises(MixedRuns) as caught:
        compare.compare("B7", [smoke, GTX])
    message = str(caught.value)
    assert "differ in train_images (1709, 192; pin one with --train-images)" in message
    assert "image_size" not in message
    result = compare.compare("B7", [smoke, GTX], allow_mixed=True)
    assert (result.shared["train_images"], result.shared["image_size"]) == (0, 600)


def test_runs_computed_differently_are_refused_naming_settings() -> None:
    # Torch runs with the backend's own kernels against Keras's code path: up to 4x apart.
    kernels = with_values(T4, backend=("torch",), settings=("kernels",))
    keras = with_values(GTX, backend=("torch",))
    with pytest.raises(MixedRuns) as caught:
        compare.compare("B7", [kernels, keras])
    message = str(caught.value)
    assert "differ in settings (keras, kernels; pin one with --settings)" in message
    assert "backend" not in message
    result = compare.compare("B7", [kernels, keras], allow_mixed=True)
    assert (result.shared["settings"], result.shared["backend"]) == ("mixed", "torch")
    assert compare.compare("B7", [kernels]).shared["settings"] == "kernels"


def test_allow_mixed_reports_mixed() -> None:
    result = compare.compare(
        "B7", [with_values(T4, backend=("torch",), image_size=(300,)), GTX], allow_mixed=True
    )
    assert (result.shared["backend"], result.shared["image_size"]) == ("mixed", 0)
    assert (result.shared["precision"], result.shared["benchmark_version"]) == ("float32", "1")


def test_shared_settings_are_reported() -> None:
    result = compare.compare("B7", [T4, GTX])
    shared = result.shared
    assert (shared["benchmark_version"], shared["backend"], shared["precision"],
            shared["image_size"], shared["train_images"], shared["settings"]) == (
        "1", "tensorflow", "float32", 600, 1709, "keras")


def test_warnings_for_few_runs_wide_spread_and_outliers() -> None:
    shaky = replace(T4, runs=2, epoch2_min_seconds=600.0, epoch2_max_seconds=700.0,
                    outliers_excluded=1)
    found = compare.group_warnings(shaky)
    assert found == [
        "1x Tesla T4: only 2 run(s); the median is shaky below 3",
        "1x Tesla T4: epoch-2 times spread 15% of the median (600-700 s)",
        "1x Tesla T4: 1 outlier run(s) left out",
    ]
    assert compare.group_warnings(T4) == []  # 4% spread, 5 runs


def test_no_runs_is_an_empty_comparison_with_a_warning() -> None:
    result = compare.compare("B3", [])
    assert result.groups == () and result.baseline == ""
    assert result.warnings == ("no OK runs of B3 match",)


def test_ties_on_the_slowest_pick_a_stable_baseline() -> None:
    a, b = group("A", 1, 10.0), group("B", 1, 10.0)
    assert compare.choose_baseline([a, b]).gpu_name == compare.choose_baseline([b, a]).gpu_name


def test_runs_of_different_batch_rules_are_refused_naming_batch_rule() -> None:
    # The largest batch that fits trains faster than the steps rule's smaller one.
    steps = with_values(T4, batch_rule=("steps",), largest_batch_per_gpu_max=3)
    largest = with_values(GTX, batch_rule=("largest",), largest_batch_per_gpu_max=2)
    with pytest.raises(MixedRuns) as caught:
        compare.compare("B7", [steps, largest])
    message = str(caught.value)
    assert "differ in batch_rule (largest, steps; pin one with --batch-rule)" in message
    assert message.endswith("or compare them anyway with allow_mixed (--allow-mixed)")
    assert "settings" not in message
    assert compare.compare("B7", [steps, largest], allow_mixed=True).shared["batch_rule"] == "mixed"
    assert compare.compare("B7", [steps]).shared["batch_rule"] == "steps"


def test_runs_that_do_not_say_how_their_batch_was_chosen_are_named_unrecorded() -> None:
    with pytest.raises(MixedRuns, match=r"batch_rule \(unrecorded, given; pin one with "):
        compare.compare("B7", [with_values(T4, batch_rule=("",)),
                               with_values(GTX, batch_rule=("given",))])


def test_every_dimension_is_pinned_by_a_flag_gpubench_compare_has() -> None:
    from gpubench.cli import compare as compare_command

    flags = {opt for param in compare_command.params for opt in param.opts}
    assert [d.flag for d in comparison_key.DIMENSIONS if d.flag not in flags] == []


def test_every_dimension_is_a_column_of_the_outlier_groups() -> None:
    from gpubench.collector import aggregates, outliers

    columns = aggregates.KEY_COLUMNS
    assert list(comparison_key.NAMES) == list(columns)
    assert set(columns) <= set(outliers.OUTLIER_GROUP)


def test_a_refusal_names_each_difference_and_its_flag() -> None:
    unlike = with_values(T4, pipeline=("seed",), weights=("imagenet",), data=("synthetic-rps",),
                     epochs=(2,), gpu_name="NVIDIA H200")
    alike = with_values(T4, pipeline=("cached",), weights=("none",), data=("sha256:ab",),
                    epochs=(5,))
    with pytest.raises(MixedRuns) as caught:
        compare.compare("B7", [alike, unlike])
    assert str(caught.value) == (
        "the B7 runs differ in pipeline (cached, seed; pin one with --pipeline); weights "
        "(imagenet, none; pin one with --weights); data (sha256:ab, synthetic-rps; pin one with "
        "--data); epochs (2, 5; pin one with --epochs); or compare them anyway with "
        "allow_mixed (--allow-mixed)")


def test_published_groups_say_how_they_differ() -> None:
    mine = with_values(T4, backend=("torch",), settings=("kernels+cuda-graphs",),
                   pipeline=("cached",), weights=("none",), data=("synthetic-rps",))
    article = with_values(T4, pipeline=("seed",), weights=("imagenet",),
                      data=("rock-paper-scissors",), source="the article")
    result = compare.compare("B7", [mine], published=[article])
    [published] = result.published
    assert published.figures.source == "the article"
    assert published.differences == ("backend tensorflow", "settings keras", "pipeline seed",
                                     "weights imagenet", "data rock-paper-scissors")
    alone = compare.compare("B7", [], published=[article])
    assert alone.groups == () and len(alone.published) == 1


def test_a_card_not_yet_catalogued_is_compared_apart() -> None:
    # Faster than every catalogued group, and slower than the slowest: neither leads nor
    # is the baseline; each has its speedup against the baseline.
    fast = with_values(group("NVIDIA GeForce RTX 6090", 1, 41.0), uncatalogued=True)
    slow = with_values(group("NVIDIA GeForce GTX 1010", 1, 1810.0), uncatalogued=True)
    result = compare.compare("B7", [slow, T4, fast, GTX])
    assert result.baseline == "1x NVIDIA GeForce GTX 1070"
    assert [g.figures.gpu_name for g in result.groups] == ["Tesla T4", "NVIDIA GeForce GTX 1070"]
    assert [(g.figures.gpu_name, g.speedup, g.is_baseline) for g in result.uncatalogued] == [
        ("NVIDIA GeForce RTX 6090", pytest.approx(905.0 / 41.0), False),
        ("NVIDIA GeForce GTX 1010", pytest.approx(0.5), False)]
    with pytest.raises(NotFound,
                       match=r"baseline_gpu \(--baseline\): no runs of 1x NVIDIA GeForce RTX 6090"):
        compare.compare("B7", [T4, fast], baseline_gpu="NVIDIA GeForce RTX 6090")
    # Only cards not yet catalogued: nothing compared, and they are still shown.
    alone = compare.compare("B7", [fast])
    assert alone.groups == () and [g.figures for g in alone.uncatalogued] == [fast]
