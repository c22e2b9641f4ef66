"""The CLI's tables at 80 columns (what `gpubench` prints where stdout is no terminal):
every line fits, no word is cut with "…" and nothing is left out, for long GPU names,
long run ids and long submitters. Each table is rendered as the CLI renders it, by a
rich Console 80 columns wide, and set beside the same table at a width where it is
drawn whole."""

from __future__ import annotations

import io
from collections import Counter

from factories import make_run
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.table import Table

from gpubench import frames, tables
from gpubench.v1 import collector_pb2

GIB = 1024**3
WIDTH = 80
WHOLE = 400  # wide enough for every table below at its natural widths

# Real cards' names as NVML reports them, the longest first.
LAPTOP = "NVIDIA GeForce RTX 4090 Laptop GPU"
ADA = "NVIDIA RTX 6000 Ada Generation"
A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def rendered(table: RenderableType, width: int = WIDTH) -> str:
    """`table` as the CLI prints it on a stdout `width` columns wide."""
    out = io.StringIO()
    Console(file=out, width=width).print(table)
    return out.getvalue()


def characters(text: str) -> Counter[str]:
    """What a table shows, whatever its layout: its characters but spaces, line breaks
    and the header's rule (as long as the table is wide)."""
    return Counter(c for c in text if not c.isspace() and c != "─")


def assert_fits_whole(table: Table, *words: str) -> str:
    """`table` at 80 columns: no line wider, no "…", every character of the table drawn
    whole, and each of `words` unbroken on a line of its own or between spaces."""
    text = rendered(table)
    assert "…" not in text, text
    assert max(cell_len(line) for line in text.splitlines()) <= WIDTH, text
    assert characters(text) == characters(rendered(table, WHOLE)), text
    tokens = set(text.split())
    assert [word for word in words if word not in tokens] == [], text
    return text


def _group(name: str, count: int, seconds: float, **fields: object) -> dict[str, object]:
    return dict(gpu_name=name, gpu_count=count, runs=3, submitters=2,
                epoch2_median_seconds=seconds, epoch2_min_seconds=seconds * 0.98,
                epoch2_max_seconds=seconds * 1.04,
                train_images_per_second_median=1709 / seconds, max_batch_per_gpu=64,
                max_global_batch=64 * count, largest_batch_per_gpu_max=96,
                peak_memory_median_bytes=30 * GIB, memory_total_bytes=80 * GIB,
                peak_memory_share=30 / 80, energy_per_epoch_median_joules=seconds * 600,
                images_per_joule=1709 / (seconds * 600), **fields)


def compare_frame() -> frames.pd.DataFrame:
    """A B7 comparison of four cards with long names, one of them under --memory-limit,
    with outliers and flagged runs counted, a published run and an uncatalogued card."""
    response = collector_pb2.CompareResponse(
        model="B7", baseline=f"1x {LAPTOP}", backend="tensorflow", precision="float32",
        image_size=600, benchmark_version="1")
    response.groups.add(**_group(A100, 8, 9.5, speedup=14.7, outliers_excluded=2))
    response.groups.add(**_group(ADA, 2, 80.0, speedup=1.75, flagged_included=1))
    response.groups.add(**_group(H100, 1, 120.0, speedup=1.17, memory_limit_bytes=16 * GIB))
    response.groups.add(**_group(LAPTOP, 1, 140.0, speedup=1.0, is_baseline=True))
    response.published.add(**_group("Tesla T4", 1, 900.0, source="the article's Colab run",
                                    differences=["weights imagenet", "data rock-paper-scissors"]))
    response.uncatalogued.add(**_group("NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                                       1, 60.0, speedup=2.33))
    return frames.compare_frame(response)


def leaderboard_frame() -> frames.pd.DataFrame:
    """A B0 leaderboard whose entries ran differently (an "as run" column), long names."""
    response = collector_pb2.LeaderboardResponse(model="B0", benchmark_version="1",
                                                 settings="keras", batch_rule="steps")
    for rank, (name, pipeline) in enumerate([(A100, "cached-on-device"), (ADA, "cached"),
                                             (LAPTOP, "cached")], start=1):
        response.entries.add(
            rank=rank, gpu_name=name, gpu_count=rank, runs=3 * rank, submitters=rank - 1,
            corroborated=rank == 1, best_epoch2_seconds=0.6 * rank,
            epoch2_median_seconds=0.7 * rank, train_images_per_second_median=2739 / rank,
            max_batch_per_gpu=128, largest_batch_per_gpu_max=1221, backend="torch",
            precision="mixed_bfloat16", pipeline=pipeline, weights="none",
            data="synthetic-rps", epochs=2)
    return frames.leaderboard_frame(response)


def runs_frame() -> frames.pd.DataFrame:
    """Stored runs of two models on cards with long names: run ids of 8 and 12
    characters (the shortest unique prefixes), a long submitter, an unrecognised GPU."""
    stored = []
    for index, (name, model, submitter) in enumerate([
            (A100, "B0", "reference"), (LAPTOP, "B0", "university-hpc-lab-batch-queue"),
            (ADA, "MobileNetV3Small", "lab"), (H100, "B0", "someone")]):
        run = make_run(gpu_name=name, gpu_count=1 + index % 2, model=model, batch_per_gpu=64,
                       epoch2_seconds=5.0, peak_memory_bytes=9 * GIB,
                       run_id=f"{index}d9a901f-9aea-49f6-a6ad-be726893bbe2")
        one = collector_pb2.StoredRun(run=run, submitter=submitter,
                                      short_id=run.run_id[:12 if index == 1 else 8])
        one.gpu_unrecognised = one.flagged = index == 3
        stored.append(one)
    return frames.runs_frame(stored)


def test_a_comparison_fits_80_columns_its_figures_whole() -> None:
    frame = compare_frame()
    # Ten columns whose longest words alone take 76 of the 71 left between the columns'
    # spaces: the GPU configurations fold their names, the figures stay whole.
    assert_fits_whole(tables.compare_table(frame), "[9.31-9.88]", "[78.4-83.2]", "outlier)",
                      "flagged)", "14.7x", "0.0356", "(38%)", "limit)")
    assert_fits_whole(tables.published_table(frames.published_of(frame)),
                      "rock-paper-scissors")
    assert_fits_whole(tables.uncatalogued_table(frames.uncatalogued_of(frame)),
                      "Blackwell", "Workstation")


def test_a_leaderboard_fits_80_columns_its_figures_whole() -> None:
    # Eleven columns, "as run" among them (the entries ran differently): that column
    # folds, down to 4 characters, and the widest name gives up the one column left.
    table = tables.leaderboard_table(leaderboard_frame())
    assert "as run" in rendered(table, WHOLE)
    assert_fits_whole(table, "Generation", "Laptop", "(one", "source)", "0.600", "2,739",
                      "1221", "bf16")


def test_a_list_of_runs_fits_80_columns_with_its_ids_whole() -> None:
    b0, mobilenet = tables.runs_tables(runs_frame(), title="measured runs")  # one a model
    # The run ids (what `runs show` takes) never split; the long submitter folds.
    assert_fits_whole(b0, "0d9a901f", "1d9a901f-9ae", "3d9a901f", "Laptop", "(2x64)/-",
                      "(38%)", "5.00")
    assert_fits_whole(mobilenet, "2d9a901f", "Generation", "submitter", "(19%)")


def test_a_run_and_its_search_fit_80_columns() -> None:
    run = make_run(gpu_name=ADA, gpu_count=2, model="B7")
    run.result.batch_trials.add(batch=24, fits=False, message=(
        "RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[24,2560,19,19] and type "
        "float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"))
    stored = collector_pb2.StoredRun(run=run, submitter="lab")
    for table in tables.run_tables(stored):
        assert_fits_whole(table)


def test_where_the_words_do_not_fit_side_by_side_they_fold_but_none_is_cut() -> None:
    # Twelve columns of long words, far over 80 columns even one word each.
    columns = [f"column-{index:02d}" for index in range(12)]
    table = tables.text_table(columns, [[f"word-{index:02d}-of-a-row" for index in range(12)]])
    assert_fits_whole(table)


class RichLayout:
    """A table drawn by rich's own layout (Table's own __rich_console__)."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        return Table.__rich_console__(self.table, console, options)


def test_rich_alone_would_cut_what_the_narrow_layout_folds() -> None:
    table = tables.compare_table(compare_frame())
    # rich narrows the widest columns first, down to cutting their words.
    assert "[min-ma…" in rendered(RichLayout(table))
    assert "[min-max]" in rendered(table).split()


def test_a_table_drawn_narrow_is_drawn_whole_again_at_its_full_width() -> None:
    table = tables.leaderboard_table(leaderboard_frame())
    whole = rendered(table, WHOLE)
    rendered(table, WIDTH)  # lays out a copy: the table itself keeps its columns
    assert rendered(table, WHOLE) == whole
    assert all(column.width is None for column in table.columns)


def test_text_cells_are_never_markup() -> None:
    text = rendered(tables.text_table(("file",), [("[bold]a[/bold].json",)]), width=60)
    assert "[bold]a[/bold].json" in text
