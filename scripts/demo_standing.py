"""The end of `make demo`: the demo's own run beside the reference runs it loaded and,
in a section of their own, the published figures (transcribed, not measured)."""

from __future__ import annotations

import pandas as pd
from rich.table import Table
from rich.text import Text

from gpubench import comparison_key, figures, frames, tables

# Each table fits 80 columns; the legend explains the short headings once.
LEGEND = ("px: image size; img/ep: training images an epoch; img/s: training images a "
          f"second in epoch 2; {tables.BATCH_LEGEND}")


def _int(value: object) -> int:
    return 0 if frames.is_missing(value) else int(value)  # type: ignore[call-overload]


def _row_cells(row: dict) -> list[str | Text]:
    return [
        Text(str(row["label"] or row["submitter"])),
        Text(row["gpu_config"]),
        str(_int(row["image_size"]) or frames.MISSING),
        str(_int(row["train_images"]) or frames.MISSING),
        figures.batch(row["timed_batch_per_gpu"], row["timed_global_batch"], row["gpu_count"]),
        figures.largest_batch(row["largest_batch_per_gpu"], row["largest_batch_capped"]),
        figures.seconds(row["epoch2_s"], unit=False),
        figures.three_digits(row["train_images_per_s"]),
    ]


def _table(title: str, rows: pd.DataFrame, caption: str | None = None) -> Table:
    table = tables.narrow_table(title, caption)
    for name, right in (("run", False), ("GPU config", False), ("px", True), ("img/ep", True),
                        (figures.TIMED_BATCH, True), (figures.LARGEST_BATCH, True),
                        ("epoch 2 (s)", True), ("img/s", True)):
        table.add_column(name, justify="right" if right else "left")
    for row in rows.to_dict("records"):
        table.add_row(*_row_cells(row), style="bold" if row.get("you") else None)
    return table


def standing_tables(frame: pd.DataFrame, *, you: str) -> list[Table | Text]:
    """The demo's runs (submitted with token `you`) above the measured reference runs,
    the published runs apart; a sentence says how far apart they are, and why that is not
    like for like when they differ."""
    frame = frame.assign(you=frame["submitter"] == you)
    mine = frame[frame["you"]]
    measured = frame[~frame["published"]].sort_values(["you", "label"],
                                                      ascending=[False, True])
    published = frame[frame["published"]]
    out: list[Table | Text] = [_table("measured runs (yours in bold)", measured,
                                      caption=LEGEND)]
    if not published.empty:
        out.append(_table("published figures: transcribed, not measured by gpubench",
                          published))
    out.append(Text(_verdict(mine, measured[~measured["you"]])))
    return out


def _verdict(mine: pd.DataFrame, others: pd.DataFrame) -> str:
    """One line per measured reference run, fastest first: where it ran as yours did (the
    whole comparison key alike), how many times your rate (images or tokens a second) it
    trains at; where it did not, in what it differs, and no ratio: a ratio of unlike runs
    times different work (a 64 px smoke run against a 224 px one gave 3x to 12x for the
    same two machines). Published figures are not set against it: shown apart, as
    everywhere."""
    if mine.empty or frames.is_missing(mine.iloc[0]["train_images_per_s"]):
        return "your run has no epoch-2 figure to compare (it did not finish)"
    run = mine.iloc[0].to_dict()
    unit = str(run.get("unit") or "images")
    rate = figures.rate_unit(unit)
    yours = float(run["train_images_per_s"])
    lines = [f"you: {figures.three_digits(yours)} {rate} in epoch 2 on {run['gpu_config']}. "
             f"Beside the measured runs, fastest first, a {figures.SPEEDUP} (their {rate} "
             "over yours) only where a run ran as yours did; the published figures are "
             "not set against it:"]
    timed = [row for row in others.to_dict("records")
             if not frames.is_missing(row["train_images_per_s"])]
    for row in sorted(timed, key=lambda row: -float(row["train_images_per_s"])):
        unlike = [dimension.words for dimension in comparison_key.DIMENSIONS
                  if row[dimension.name] != run[dimension.name]]
        head = f"{row['label'] or row['submitter']} ({row['gpu_config']}): "
        if unlike:
            lines.append(head + f"not like yours in {', '.join(unlike)}: no {figures.SPEEDUP}")
        else:
            ratio = float(row["train_images_per_s"]) / yours
            lines.append(head + f"{figures.SPEEDUP} {figures.speedup(ratio)}")
    return "\n".join(lines)
