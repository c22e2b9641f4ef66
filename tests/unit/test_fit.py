"""`gpubench fit`'s arithmetic: which run answers, the batch it predicts, how sure."""

from __future__ import annotations

from factories import make_run

from gpubench import fit
from gpubench.memory_line import HEADROOM, MemoryLine
from gpubench.v1 import run_pb2

GIB = 1 << 30


def _searched(trials: list[tuple[int, bool, int]], *, largest: int, gpu: str = "NVIDIA H200",
              memory_limit: int = 0, capped: bool = False) -> run_pb2.Run:
    run = make_run(model="B7", gpu_name=gpu, backend="torch")
    run.config.memory_limit_bytes = memory_limit
    run.result.largest_batch_per_gpu = largest
    run.result.largest_batch_capped = capped
    for batch, fits, reserved in trials:
        run.result.batch_trials.append(
            run_pb2.BatchTrial(batch=batch, fits=fits, peak_memory_bytes=max(0, reserved - 1),
                               reserved_peak_bytes=reserved))
    return run


# 1 GiB fixed and 2 GiB an image, exactly.
LINE_TRIALS = [(2, True, 5 * GIB), (10, True, 21 * GIB), (40, False, 0)]


def test_the_line_through_the_trials_predicts_the_largest_batch() -> None:
    run = _searched(LINE_TRIALS, largest=60)
    found = fit.fit_run(run, 8 * GIB)
    assert found is not None and found.basis == fit.LINE
    assert found.line == MemoryLine(1 * GIB, 2 * GIB)
    # 8 GiB less 12% is 7.04 GiB: (7.04 - 1) / 2 = 3.02 images.
    assert HEADROOM == 0.12 and found.batch == 3
    assert found.trial_batches == (2, 10) and not found.extrapolated
    # 4 GiB leaves 3.52 GiB: batch 1, below the smallest batch tried.
    smaller = fit.fit_run(run, 4 * GIB)
    assert smaller is not None and smaller.batch == 1 and smaller.extrapolated


def test_the_reference_h200_b7_line_matches_its_searches_under_memory_limits() -> None:
    # The default run's B7 search on an H200 (docs/results/runs/h200-b7-default.json):
    # reserved peaks at batches 2, 16, 30. `gpubench-agent largest-batch --memory-limit`
    # found 1, 3 and 10 under 8, 16 and 48 GiB (docs/results/h200-default-run.md).
    run = _searched([(2, True, 9_814_671_360), (16, True, 70_315_409_408),
                     (30, True, 130_308_636_672)], largest=30)
    assert [fit.fit_run(run, gib * GIB).batch for gib in (8, 16, 48)] == [1, 3, 10]


def test_a_search_at_that_memory_answers_before_any_line() -> None:
    at_16 = _searched(LINE_TRIALS, largest=3, memory_limit=16 * GIB)
    near = _searched(LINE_TRIALS, largest=4, gpu="Tesla T4")  # 15 GiB: within 10% of 16
    far = _searched(LINE_TRIALS, largest=60)
    result = fit.answer([far, at_16, near], 16 * GIB)
    assert result.basis == fit.SEARCHED
    assert result.batches == [3, 4] and result.batch == 3 and result.confidence == "fair"
    assert len(result.fits) == 3 and len(result.deciding) == 2
    alone = fit.answer([at_16], 16 * GIB)
    assert (alone.batch, alone.confidence) == (3, "high")


def test_one_published_peak_gives_a_floor() -> None:
    # The article's T4, B7: 9.88 GB at batch 2, so at most 4.94 GB an image; 8 GiB less
    # 12% is 7,559,142,440 bytes: 1.53 images, batch 1 at least.
    article = make_run(model="B7", gpu_name="Tesla T4", batch_per_gpu=2,
                       peak_memory_bytes=9_880_000_000)
    found = fit.fit_run(article, 8 * GIB)
    assert found is not None and (found.basis, found.batch) == (fit.BOUND, 1)
    assert fit.answer([article], 8 * GIB).confidence == "floor"


def test_runs_computed_differently_are_answered_apart() -> None:
    float32 = _searched(LINE_TRIALS, largest=60)
    bf16 = _searched([(2, True, 3 * GIB), (10, True, 11 * GIB)], largest=120)
    bf16.config.precision = "mixed_bfloat16"
    answers = fit.answers([float32, bf16], 8 * GIB)
    assert sorted(answers) == ["torch float32 keras, 600 px", "torch mixed_bfloat16 keras, 600 px"]
    # bfloat16's line: 1 GiB an image, 1 GiB fixed: (7.04 - 1) / 1 = 6.
    assert answers["torch mixed_bfloat16 keras, 600 px"].batch == 6
    assert answers["torch float32 keras, 600 px"].batch == 3


def test_nothing_fits_reads_as_batch_zero() -> None:
    run = _searched(LINE_TRIALS, largest=60)
    assert fit.fit_run(run, 2 * GIB).batch == 0  # 1.76 GiB leaves nothing beyond 1 GiB + 2


def test_a_run_without_memory_figures_says_nothing() -> None:
    run = make_run(model="B7", peak_memory_bytes=0)
    assert fit.fit_run(run, 8 * GIB) is None


def test_a_language_model_too_big_for_8_gib_is_an_answer_not_an_error() -> None:
    from gpubench import answers, models

    # A language model's search on an H200: 12 GiB fixed (weights, Adam's state, the
    # head's logits) and 1.2 GiB a sequence; a card of 8 GiB holds not even one.
    run = make_run(gpu_name="NVIDIA H200", backend="torch", batch_per_gpu=16)
    run.config.model, run.config.image_size = models.LM, 0
    run.config.model_fingerprint, run.config.unit = "ab" * 32, models.TOKENS
    run.result.largest_batch_per_gpu = 40
    for batch, fits in ((1, True), (4, True), (120, False)):
        reserved = int((12 + 1.2 * batch) * GIB) if fits else 0
        run.result.batch_trials.append(run_pb2.BatchTrial(
            batch=batch, fits=fits, peak_memory_bytes=reserved, reserved_peak_bytes=reserved))
    document = answers.fit_document(answers.Runs(measured=[run]), models.LM, 8 * GIB)
    verdicts = [result["verdict"] for result in document["measured"].values()]
    assert verdicts == ["does not fit, not even batch 1"], document
    assert fit.fit_run(run, 24 * GIB).batch == 7  # (24 x 0.88 - 12) / 1.2 = 7.6
