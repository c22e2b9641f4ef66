"""Collector answers laid out for people: rich tables of 80 columns from gpubench.frames'
DataFrames, every figure formatted by gpubench.figures ("17.0x", "12.3 kJ", "-" for what
was not measured).
"""

from __future__ import annotations

import copy
from typing import Any

import pandas as pd
from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

from gpubench import comparison_key, figures, record
from gpubench.figures import MISSING, is_missing
from gpubench.frames import SHARED, flat_run, to_gib
from gpubench.v1 import collector_pb2


def format_time(stamp: Any) -> str:
    """'2025-06-30 14:05' (UTC)."""
    if is_missing(stamp):
        return MISSING
    return pd.Timestamp(stamp).tz_convert("UTC").strftime("%Y-%m-%d %H:%M")


def _int(value: Any) -> int:
    return 0 if is_missing(value) else int(value)


def _epoch(median: float, low: float, high: float, runs: int) -> str:
    """'17.0 [16.8-17.3]': the median and, when runs differ, their range."""
    text = figures.seconds(median, unit=False)
    if runs > 1 and not (is_missing(low) or is_missing(high)) and low != high:
        text += f" [{figures.seconds_range(low, high, unit=False)}]"
    return text


def _memory(row: dict[str, Any], gib: str = "peak_memory_median_gib") -> str:
    """A row's peak memory and its share: of its --memory-limit where it had one."""
    return figures.memory(row[gib], row["peak_memory_share"],
                          of_limit=not is_missing(row.get("memory_limit_gib")))


# -- rich tables --------------------------------------------------------------------------


# A column that folds its words (a submitter, a message) is sure of this much room: its
# words up to this long stay whole, a longer one folds where the columns are tight.
FOLDED = 12
# Where the columns' words do not fit side by side even so, columns give up room down to
# this, those that fold first: rich's own layout draws a table that needs less still.
SQUEEZED = 4


def _measured(table: Table, console: Console, options: ConsoleOptions,
              column: Column) -> Measurement:
    """A column's narrowest width (its longest word) and widest (its longest line), its
    header and footer included, within its min_width and max_width."""
    if column.width is not None:
        return Measurement(column.width, column.width)
    cells = [*([column.header] if table.show_header else []), *column.cells,
             *([column.footer] if table.show_footer else [])]
    found = [Measurement.get(console, options, cell) for cell in cells]
    measured = Measurement(max((m.minimum for m in found), default=1),
                           max((m.maximum for m in found), default=1))
    return measured.clamp(column.min_width, column.max_width)


def _shares(room: int, wants: list[int]) -> list[int]:
    """`room` shared out in proportion to `wants`, each share rounded up in turn so that
    the shares add up to `room` (where the wants add up to at least that)."""
    shares = []
    wanted = sum(wants)
    for want in wants:
        share = min(want, -(-want * room // wanted)) if wanted else 0
        shares.append(share)
        room -= share
        wanted -= want
    return shares


def narrow_widths(table: Table, console: Console,
                  options: ConsoleOptions) -> list[tuple[int, bool]] | None:
    """Each of `table`'s columns' width at `options`' width, and whether it must fold its
    words (break one over lines) to get there; None where rich's own layout draws the
    table as it is: it fits at its natural widths, it pads its cells, or its unbroken
    columns (no_wrap, a fixed width) alone take the room.

    Each column keeps at least its longest word (a column that folds, up to FOLDED), and
    the room left goes to those that want more, in proportion. Where even the longest
    words do not fit side by side, columns fold (break a word over lines) rather than
    cut it with "…": those that fold already first, the last first, down to SQUEEZED;
    then the others, names before figures, the widest first, down to SQUEEZED."""
    if not table.columns or any(table.padding[1::2]):  # the cells' left and right padding
        return None
    separators = (len(table.columns) - 1 if table.box else 0) + (
        2 if table.box and table.show_edge else 0)
    room = (table.width or options.max_width) - separators
    if room < len(table.columns):
        return None
    ranges = [_measured(table, console, options.update_width(room), column)
              for column in table.columns]
    natural = [max(r.maximum, 1) for r in ranges]
    if sum(natural) <= room:
        return None
    unbroken = [column.no_wrap or column.width is not None for column in table.columns]
    words = [n if whole else max(r.minimum, 1)
             for n, r, whole in zip(natural, ranges, unbroken, strict=True)]
    folds = [column.overflow == "fold" and not whole
             for column, whole in zip(table.columns, unbroken, strict=True)]
    least = [min(w, FOLDED) if fold else w for w, fold in zip(words, folds, strict=True)]
    excess = sum(least) - room
    # Too narrow for the words: the columns that fold give up more, the last first...
    for index in reversed(range(len(least))):
        if excess > 0 and folds[index]:
            cut = min(excess, max(least[index] - SQUEEZED, 0))
            least[index] -= cut
            excess -= cut
    # ...then the others break their words too: names (left-justified) before figures
    # (right-justified: a figure broken over two lines is misread), the widest first.
    while excess > 0:
        narrowed = [i for i, whole in enumerate(unbroken)
                    if not whole and least[i] > SQUEEZED]
        if not narrowed:
            return None
        least[max(narrowed, key=lambda i: (table.columns[i].justify != "right", least[i]))] -= 1
        excess -= 1
    extra = _shares(room - sum(least), [n - m for n, m in zip(natural, least, strict=True)])
    return [(m + e, m + e < w) for m, e, w in zip(least, extra, words, strict=True)]


class NarrowTable(Table):
    """A table that wraps its columns at spaces rather than cut their words (rich's own
    layout narrows the widest columns first, down to cutting their words with "…"): its
    columns laid out by narrow_widths, which measures their cells with rich's public
    Measurement.get, then drawn by rich with those widths as each Column.width, on a
    copy (the table stays as built, to be drawn again at another width)."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = narrow_widths(self, console, options)
        if widths is None:
            yield from super().__rich_console__(console, options)
            return
        laid_out = copy.copy(self)
        laid_out.columns = [copy.copy(column) for column in self.columns]
        for column, (width, fold) in zip(laid_out.columns, widths, strict=True):
            column.width = width
            if fold:
                column.overflow = "fold"
        yield from Table.__rich_console__(laid_out, console, options)


def narrow_table(title: str | None = None, caption: str | None = None,
                 show_header: bool = True) -> Table:
    """A table for 80 columns: a rule under the header instead of a box, one space
    between columns; title and legend (caption) left-aligned, wrapped, never cut."""
    # The box's own separator is the one space between columns: no padding, no edges.
    return NarrowTable(title=title, caption=caption, box=box.SIMPLE_HEAD, padding=0,
                 show_edge=False, title_justify="left", caption_justify="left",
                 show_header=show_header)


# Precisions as a narrow column shows them (explained by PRECISION_LEGEND).
SHORT_PRECISION = {"float32": "fp32", "mixed_bfloat16": "mixed bf16",
                   "mixed_float16": "mixed fp16"}
PRECISION_LEGEND = "fp32: float32; mixed bf16/fp16: mixed_bfloat16/mixed_float16"


def short_precision(precision: str) -> str:
    """'fp32', 'mixed bf16', 'mixed fp16' (anything else as it is)."""
    return SHORT_PRECISION.get(precision, precision)


# The shared dimensions' names in a title or legend.
DIMENSION_WORDS = {d.name: d.words for d in comparison_key.DIMENSIONS}
# Dimensions counted in integers: a comparison of unlike runs reads 0 where they differ.
_NUMERIC = tuple(d.name for d in comparison_key.DIMENSIONS if d.numeric)


def mixed_dimensions(frame: pd.DataFrame) -> list[str]:
    """The dimensions in which a comparison's runs differ (--allow-mixed), in SHARED's
    order; none for a like-for-like comparison."""
    if frame.empty:
        return []
    attrs = frame.attrs
    if "mixed" in attrs:  # as the collector said (compare_frame)
        return [name for name in SHARED if name in attrs["mixed"]]
    return [name for name in SHARED
            if (name in _NUMERIC and name in attrs and not attrs[name])
            or attrs.get(name) == "mixed"]


def compare_title(frame: pd.DataFrame) -> str:
    """'B7 · tensorflow · float32 · 600 px · 1709 training images · settings keras ·
    batch steps · pipeline cached · weights none · data synthetic-rps · 2 epochs ·
    benchmark 1': what the compared runs share (what differs is left out; the table's
    legend names it)."""
    attrs = frame.attrs
    parts = [attrs.get("model", "")]
    shared = {k: v for k, v in attrs.items() if k in SHARED and v != "mixed"}
    for dimension in comparison_key.TITLE_ORDER:
        if shared.get(dimension.name) and shared[dimension.name] != dimension.title_unless:
            parts.append(dimension.title.format(shared[dimension.name]))
    return " · ".join(p for p in parts if p)


# The mark of a row compared with runs unlike it (--allow-mixed).
UNLIKE = "*"


# The legend's words for the two batches and the ratio (gpubench.figures names them).
BATCH_LEGEND = (f"timed batch: {figures.TIMED_BATCH_MEANS}; largest batch: "
                f"{figures.LARGEST_BATCH_MEANS} (+: the training set ended the search)")
LIMIT_LEGEND = ("peak memory of a configuration 'as N GiB' (--memory-limit): % of that "
                "limit")


def _limited(frame: pd.DataFrame) -> bool:
    """Whether any row ran with --memory-limit (its memory share is of the limit)."""
    return "memory_limit_gib" in frame and bool(frame["memory_limit_gib"].notna().any())


def compare_table(frame: pd.DataFrame) -> Table:
    """A comparison for the terminal (80 columns): figures with units, the baseline
    marked; where unlike runs are shown together (--allow-mixed), each speedup marked
    and the legend saying in what they differ, and how each configuration ran."""
    baseline = frame.attrs.get("baseline", "")
    mixed = mixed_dimensions(frame)
    unit = figures.unit_of_frame(frame)
    legend = ["runs: runs/submitters (medians: each submitter's, then theirs); "
              + figures.rate_legend(unit), BATCH_LEGEND]
    if _limited(frame):
        legend.append(LIMIT_LEGEND)
    if baseline:
        legend.append(f"{figures.SPEEDUP}: {figures.SPEEDUP_MEANS} ({baseline})")
    # Where unlike runs are shown together, a speedup is printed only for a configuration
    # that ran as the baseline did: any other ratio would time different work.
    like_baseline = {row["gpu_config"]: row.get("differences") for row in
                     frame.to_dict("records") if row["is_baseline"]}.get(baseline)
    if mixed:
        legend.append(f"{UNLIKE} unlike runs shown together (--allow-mixed): they differ in "
                      f"{', '.join(DIMENSION_WORDS[m] for m in mixed)}; no speedup unless "
                      "a configuration ran as the baseline did")
        legend += [f"{UNLIKE} {row['gpu_config']}: {row['differences']}"
                   for row in frame.to_dict("records") if row.get("differences")]
    title = compare_title(frame) + (" · UNLIKE RUNS" if mixed else "")
    table = narrow_table(title, "\n".join(legend))
    table.add_column("GPU config")
    table.add_column("runs", justify="right")
    table.add_column(Text("epoch 2 (s) median [min-max]"), justify="right")
    table.add_column(figures.rate_unit(unit), justify="right")
    table.add_column(figures.TIMED_BATCH, justify="right")
    table.add_column(figures.LARGEST_BATCH, justify="right")
    table.add_column("peak memory (% of card)", justify="right")
    table.add_column("energy per epoch", justify="right")
    table.add_column(figures.per_joule_unit(unit), justify="right")
    table.add_column(figures.SPEEDUP, justify="right")
    for row in frame.to_dict("records"):
        config = row["gpu_config"] + ("  (baseline)" if row["is_baseline"] else "")
        runs = f"{_int(row['runs'])}/{_int(row['submitters'])}"
        if _int(row["outliers_excluded"]):
            runs += f" (+{_int(row['outliers_excluded'])} outlier)"
        if _int(row["flagged_included"]):
            runs += f" ({_int(row['flagged_included'])} flagged)"
        table.add_row(
            Text(config, style="bold" if row["is_baseline"] else ""),
            runs,
            _epoch(row["epoch2_median_s"], row["epoch2_min_s"], row["epoch2_max_s"],
                   _int(row["runs"])),
            figures.three_digits(row["images_per_s_median"]),
            figures.batch(row["timed_batch_per_gpu"], row["timed_global_batch"],
                          row["gpu_count"]),
            figures.largest_batch(row["largest_batch_per_gpu"]),
            _memory(row),
            figures.energy(row["energy_per_epoch_j"]),
            figures.three_digits(row["images_per_joule"]),
            (MISSING + UNLIKE if mixed and row.get("differences") != like_baseline
             else figures.speedup(row["speedup"])),
        )
    return table


def published_table(published: pd.DataFrame, *, beside: str = "") -> Table:
    """Published runs for the terminal, apart from measured ones: their figures, how they
    differ from the runs they stand beside, and, in the legend, where they come from."""
    sources = [f"{row['gpu_config']}: {row['source']}"
               for row in published.to_dict("records") if row["source"]]
    table = narrow_table(
        "published figures: transcribed, not measured by gpubench"
        + (f"; not like for like with {beside}" if beside else ""),
        "\n".join(dict.fromkeys(sources)) or None,
    )
    table.add_column("GPU config")
    table.add_column("runs", justify="right")
    table.add_column("epoch 2 (s)", justify="right")
    table.add_column(figures.TIMED_BATCH, justify="right")
    table.add_column("peak memory (% of card)", justify="right")
    table.add_column("unlike the runs above", overflow="fold")
    for row in published.to_dict("records"):
        table.add_row(
            Text(row["gpu_config"]),
            str(_int(row["runs"])),
            figures.seconds(row["epoch2_median_s"], unit=False),
            figures.batch(row["timed_batch_per_gpu"]),
            figures.memory(row["peak_memory_median_gib"], row["peak_memory_share"]),
            Text(row["differences"] or MISSING),
        )
    return table


def uncatalogued_table(apart: pd.DataFrame) -> Table:
    """Runs on cards not yet in the collector's GPU catalogue, for the terminal, apart
    from the catalogued cards' (a comparison's groups or a leaderboard's entries, with
    "in_catalogue" false): their figures, and in the legend how to have a card added."""
    table = narrow_table(f"{figures.NOT_CATALOGUED}: runs on cards the collector's GPU "
                         "catalogue does not list yet, never ranked with those above",
                         figures.ASK_FOR_A_CARD[:1].upper() + figures.ASK_FOR_A_CARD[1:] + ".")
    speedups = "speedup" in apart and apart["speedup"].notna().any()
    table.add_column("GPU config")
    table.add_column("runs", justify="right")
    table.add_column("median epoch 2 (s)", justify="right")
    table.add_column("img/s", justify="right")
    if speedups:
        table.add_column(figures.SPEEDUP, justify="right")
    for row in apart.to_dict("records"):
        cells: list[Text | str] = [Text(row["gpu_config"]), str(_int(row["runs"])),
                 figures.seconds(row["epoch2_median_s"], unit=False),
                 figures.three_digits(row["images_per_s_median"])]
        if speedups:
            cells.append(figures.speedup(row["speedup"]))
        table.add_row(*cells)
    return table


# Backends as a narrow column shows them.
SHORT_BACKEND = {"tensorflow": "tf"}


def cost_table(costed: pd.DataFrame) -> Table:
    """What the cards buy: speed, price, images/s per 1,000 USD and images per joule
    (a comparison with `prices.cost_frame`'s columns)."""
    unit = figures.unit_of_frame(costed)
    rate = figures.rate_unit(unit)
    table = narrow_table("what the cards buy (measured runs, medians)",
                         figures.rate_legend(unit))
    for heading in ("GPU configuration", rate, "USD", f"{rate} per 1k USD",
                    figures.per_joule_unit(unit)):
        table.add_column(heading, justify="left" if heading.startswith("GPU") else "right")
    for row in costed.to_dict("records"):
        table.add_row(Text(row["gpu_config"]), figures.three_digits(row["images_per_s_median"]),
                      figures.count(row["usd"]),
                      figures.three_digits(row["images_per_s_per_kusd"]),
                      figures.three_digits(row["images_per_joule"]))
    return table


def runs_table(frame: pd.DataFrame, *, title: str | None = None,
               legend: bool = True) -> Table:
    """Stored runs for the terminal (80 columns), newest first, one row each; run ids
    shortened to the collector's shortest unique prefix, which `gpubench runs show`
    and `runs delete` accept. `legend`: explain the abbreviations below (once, under
    the last of several tables)."""
    limited = _limited(frame)
    unit = figures.unit_of_frame(frame)
    # Runs of one model name it in the title: the columns keep the room a model's name
    # would take (runs_tables gives each model a table of its own).
    models = list(dict.fromkeys(frame["model"].astype(str)))
    one_model = len(models) == 1
    if one_model:
        title = f"{title} of {models[0]}" if title else f"runs of {models[0]}"
    table = narrow_table(
        title,
        "run: the run id's first characters (runs show takes them); tf: tensorflow; "
        f"{PRECISION_LEGEND}; batch timed / largest: {BATCH_LEGEND}; "
        f"{figures.rate_unit(unit)}: {figures.unit_words(unit)} a second; peak memory: GiB "
        "(% of card" + (" or --memory-limit" if limited else "") + ")"
        if legend else None,
    )
    # A run id (what `runs show` takes) and a model's name are never split or cut: two
    # models of one family (MobileNetV2, MobileNetV3Small) cut alike read as one.
    ids = [str(row["short_id"] or row["run_id"]) for row in frame.to_dict("records")]
    table.add_column("run", no_wrap=True, min_width=max(map(len, ids), default=3))
    table.add_column("GPU config")
    if not one_model:
        table.add_column("model", no_wrap=True, min_width=max(map(len, models), default=5))
    table.add_column("backend precision")
    # Both batches in one column, "timed/largest": a list of runs has many columns.
    table.add_column(f"batch {figures.TIMED_BATCH.split()[0]} / "
                     f"{figures.LARGEST_BATCH.split()[0]}", justify="right")
    table.add_column("epoch 2 (s)", justify="right")
    table.add_column(figures.rate_unit(unit), justify="right")
    table.add_column("peak memory", justify="right")
    table.add_column("status")
    table.add_column("submitter", overflow="fold")
    for row in frame.to_dict("records"):
        status = row["status"] + (" (outlier)" if row["outlier"] else "")
        status += (" (unrecognised GPU)" if row["gpu_unrecognised"]
                   else " (flagged)" if row["flagged"] else "")
        backend = SHORT_BACKEND.get(row["backend"], row["backend"])
        peak = figures.gib(row["peak_memory_gib"]).removesuffix(" GiB")
        if peak != MISSING and not is_missing(row["peak_memory_share"]):
            peak += f" ({figures.share(row['peak_memory_share'])})"
        table.add_row(
            Text(str(row["short_id"] or row["run_id"])),
            Text(row["gpu_config"]),
            *([] if one_model else [Text(str(row["model"]))]),
            Text(f"{backend} {short_precision(row['precision'])}".strip()),
            figures.batch(row["timed_batch_per_gpu"], row["timed_global_batch"],
                          row["gpu_count"]) + "/"
            + figures.largest_batch(row["largest_batch_per_gpu"], row["largest_batch_capped"]),
            figures.seconds(row["epoch2_s"], unit=False),
            figures.three_digits(row["train_images_per_s"]),
            peak,
            status,
            Text(row["submitter"]),
        )
    return table


def runs_tables(frame: pd.DataFrame, *, title: str, legend: bool = True) -> list[Table]:
    """runs_table for each model of `frame` in turn (first seen first), the legend under
    the last: at 80 columns a list of several models has no room for their names."""
    models = list(dict.fromkeys(frame["model"].astype(str)))
    return [runs_table(frame[frame["model"].astype(str) == model], title=title,
                       legend=legend and model == models[-1]) for model in models]


def leaderboard_title(frame: pd.DataFrame) -> str:
    """'B0 leaderboard · settings kernels+cuda-graphs · batch steps · benchmark 1'."""
    attrs = frame.attrs
    parts = [f"{attrs.get('model', '')} leaderboard"]
    for dimension in comparison_key.TITLE_ORDER:
        if dimension.name in comparison_key.RANKED_DIMENSIONS and attrs.get(dimension.name):
            parts.append(dimension.title.format(attrs[dimension.name]))
    return " · ".join(parts)


# The leaderboard's entries differ in these where the filters leave them free; one column
# "as run" says how, when they do.
AS_RUN = tuple(d.name for d in comparison_key.DIMENSIONS
               if d.name in comparison_key.ENTRY_DIMENSIONS and not d.leaderboard_help)


def leaderboard_table(frame: pd.DataFrame) -> Table:
    """A leaderboard for the terminal (80 columns): ranked by the median epoch-2 time
    (the legend says so), the best single run beside it."""
    varies = any(frame[c].nunique() > 1 for c in AS_RUN) if not frame.empty else False
    unit = figures.unit_of_frame(frame)
    table = narrow_table(
        leaderboard_title(frame),
        "ranked by the median epoch-2 time of each configuration's runs (the median of "
        "its submitters' medians); runs/src: its runs and submitters; "
        f"{CORROBORATED_MARK}: corroborated (a reference run or several submitters "
        "agree); one source: a single submitter; best: its fastest "
        f"run; {figures.rate_unit(unit)}: {figures.unit_words(unit)} a second; {BATCH_LEGEND}; "
        f"{PRECISION_LEGEND}",
    )
    table.add_column("#", justify="right")
    table.add_column("GPU config")
    table.add_column("runs/src", justify="right")
    table.add_column("best epoch 2 (s)", justify="right")
    table.add_column("median epoch 2 (s)", justify="right")
    table.add_column(figures.rate_unit(unit), justify="right")
    table.add_column(figures.TIMED_BATCH, justify="right")
    table.add_column(figures.LARGEST_BATCH, justify="right")
    table.add_column("backend")
    table.add_column("precision")
    if varies:
        table.add_column("as run", overflow="fold")
    for row in frame.to_dict("records"):
        cells = [
            str(_int(row["rank"])),
            Text(row["gpu_config"] + _standing(row)),
            f"{_int(row['runs'])}/{_int(row['submitters'])}",
            figures.seconds(row["best_epoch2_s"], unit=False),
            figures.seconds(row["epoch2_median_s"], unit=False),
            figures.three_digits(row["images_per_s_median"]),
            figures.batch(row["timed_batch_per_gpu"]),
            figures.largest_batch(row["largest_batch_per_gpu"]),
            row["backend"],
            Text(short_precision(row["precision"])),
        ]
        if varies:
            cells.append(Text(f"{row['pipeline']} · weights {row['weights']} · {row['data']} · "
                              f"{_int(row['epochs'])} epochs"))
        table.add_row(*cells)
    return table


# How a corroborated leaderboard entry is marked in the terminal.
CORROBORATED_MARK = "✓"


def _standing(row: dict[str, Any]) -> str:
    """What stands behind a leaderboard entry, after its GPU configuration: the mark of a
    corroborated figure, "one source", or nothing."""
    if row["corroborated"]:
        return f" {CORROBORATED_MARK}"
    return " (one source)" if row["one_source"] else ""


def run_facts(stored: collector_pb2.StoredRun) -> list[tuple[str, str]]:
    """What a stored run was and what it measured, in words, as (name, text) pairs: the
    terminal's `runs show` and the site's run page both show these (what was not
    recorded is left out)."""
    row = flat_run(stored)
    config = stored.run.config
    facts: list[tuple[str, str]] = []

    def add(name: str, value: Any) -> None:
        if not (is_missing(value) or value in ("", MISSING)):
            facts.append((name, str(value)))

    add("status", row["status"] + (" (outlier)" if row["outlier"] else "")
        + (" (flagged)" if row["flagged"] else ""))
    add("flagged because", row["flag_reasons"])
    add("published", row["source"] if row["published"] else "")
    add("error", row["error_message"])
    add("label", row["label"])
    add("submitter", row["submitter"])
    add("created (UTC)", format_time(row["created_at"]))
    add("received (UTC)", format_time(row["received_at"]))
    add("GPU config", row["gpu_config"])
    add("GPU memory", figures.gib(row["memory_total_gib"]))
    add("memory limit", figures.gib(row["memory_limit_gib"]))
    add("driver / CUDA", " / ".join(v for v in (row["driver_version"], row["cuda_version"]) if v))
    add("model", f"{row['model']} at {row['image_size']} px" if row["image_size"] else row["model"])
    if row.get("model_fingerprint"):
        add("model fingerprint", row["model_fingerprint"])
        add("model size", f"{row['parameter_count'] or 0:,} parameters; fed {row['input_spec']}")
    choice = BATCH_CHOICES.get(row["batch_choice"], "")
    add(figures.TIMED_BATCH, figures.batch(row["timed_batch_per_gpu"], row["timed_global_batch"],
                                           row["gpu_count"])
        + (f" (batch rule {row['batch_rule']}: {BATCH_RULES.get(row['batch_rule'], '')})"
           if row["batch_rule"] else f" ({choice})" if choice else ""))
    add(figures.LARGEST_BATCH, figures.largest_batch(row["largest_batch_per_gpu"],
                                                     row["largest_batch_capped"]))
    add("precision", row["precision"])
    options = [SETTING_WORDS[option] for option, _ in record.SETTINGS_OPTIONS
               if getattr(config, option)]
    described = ", ".join(options) or "Keras's own code path"
    add("settings", f"{row['settings']} ({described})")
    add("pipeline", row["pipeline"] + (f" (asked: {row['pipeline_asked']})"
                                       if row["pipeline_asked"] not in ("", row["pipeline"])
                                       else ""))
    add("weights", row["weights"])
    add("backend", " ".join(v for v in (row["backend"], row["backend_version"]) if v))
    add("keras", row["keras_version"])
    add("benchmark version", row["benchmark_version"])
    add("data", f"{row['data']}: {row['train_images']:,} train, "
        f"{row['validation_images']:,} validation images, {row['epochs']} epochs")
    add("seed", row["seed"] or "")
    add("epoch 1 (s)", figures.seconds(row["epoch1_s"], unit=False))
    add("epoch 2 (s)", figures.seconds(row["epoch2_s"], unit=False))
    rate = figures.rate_unit(row.get("unit") or "images")
    add(figures.EPOCH_RATE.replace("img/s", rate), figures.three_digits(row["train_images_per_s"]))
    add(figures.STEP_RATE.replace("img/s", rate), figures.three_digits(row["step_images_per_s"]))
    add("peak memory", _memory(row, "peak_memory_gib"))
    add("energy/epoch", figures.energy(row["energy_per_epoch_j"]))
    add("mean power", figures.measured(row["mean_power_w"], "W"))
    add("max temperature", figures.measured(row["max_temperature_c"], "°C"))
    add("throttle reasons", row["throttle_reasons"])
    add("warnings", row["warnings"])
    add("container image", row["container_image"])
    return facts


# How each batch rule chose the batch, and the options of a settings label, in words.
# The rules are settings.BATCH_RULES' (re-exported by record): a rule without words here
# fails at import.
_RULE_WORDS = {
    record.RULE_STEPS: "the largest power of two that fits with 8 steps an epoch",
    record.RULE_LARGEST: "the largest batch that fits",
    record.RULE_GIVEN: "--batch N",
    record.RULE_QUICK: "--quick, the article's Tesla T4 batch",
}
BATCH_RULES = {rule: _RULE_WORDS[rule] for rule in record.BATCH_RULES}
BATCH_CHOICES = {"given": "--batch N", "searched": "found by the batch search"}
SETTING_WORDS = {
    "batched_augmentation": "batched augmentation", "fused_batchnorm": "fused batch norm",
    "channels_first": "channels first", "data_on_device": "data kept on the GPU",
    "jit_compile": "compiled (jit)", "cuda_graphs": "CUDA graphs",
}


def _accuracy(value: float, published: bool) -> str:
    """An epoch's accuracy; MISSING for published figures that never gave one (the
    record's 0: nothing was transcribed), never a made-up 0.000."""
    return MISSING if published and not value else f"{value:.3f}"


def run_tables(stored: collector_pb2.StoredRun) -> list[Table]:
    """One stored run for the terminal: a summary, its epochs and its batch trials."""
    row = flat_run(stored)
    summary = narrow_table(f"run {row['run_id']}", show_header=False)
    summary.add_column("field", style="bold")
    summary.add_column("value", overflow="fold")
    for name, text in run_facts(stored):
        summary.add_row(name, Text(text))
    tables = [summary]

    result = stored.run.result
    if result.epochs:
        epochs = narrow_table("epochs")
        for name in ("epoch", "wall (s)", "train (s)", "energy", "mean power (W)",
                     "max °C", "accuracy", "val accuracy"):  # fmt: skip
            epochs.add_column(name, justify="right")
        for e in result.epochs:
            epochs.add_row(
                str(e.number),
                figures.seconds(e.wall_seconds, unit=False),
                figures.seconds(e.train_seconds, unit=False),
                figures.energy(e.energy_joules),
                figures.measured(e.mean_power_watts),
                figures.measured(e.max_temperature_c),
                _accuracy(e.accuracy, stored.run.published),
                _accuracy(e.val_accuracy, stored.run.published),
            )
        tables.append(epochs)
    if result.batch_trials:
        trials = narrow_table("largest-batch search")
        for name in ("batch", "fits", "peak memory", "seconds", "why not"):
            trials.add_column(name, justify="right" if name != "why not" else "left",
                              overflow="fold")
        for t in result.batch_trials:
            trials.add_row(
                str(t.batch),
                "yes" if t.fits else "no",
                figures.gib(to_gib(t.peak_memory_bytes)),
                figures.seconds(t.seconds, unit=False),
                Text(t.message),
            )
        tables.append(trials)
    return tables


from collections.abc import Iterable, Sequence  # noqa: E402 - for text_table alone


def text_table(columns: Sequence[str], rows: Iterable[Sequence[Any]],
               title: str | None = None, *, unbroken: Sequence[str] = ()) -> Table:
    """A narrow table (narrow_table) of `rows` under the names `columns`: each cell as
    plain text (never read as rich markup), folded where the columns do not fit; the
    cells of the `unbroken` columns (an id, a model's name) never split nor cut."""
    rows = [[str(cell) for cell in row] for row in rows]
    table = narrow_table(title)
    for index, column in enumerate(columns):
        if column in unbroken:
            table.add_column(column, no_wrap=True, min_width=max(
                [len(column), *(len(row[index]) for row in rows)]))
        else:
            table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table
