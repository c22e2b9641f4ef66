"""Collector answers as DataFrames and as tables with units."""

from __future__ import annotations

import io
import json
import math

import pandas as pd
import pytest
from rich.console import Console

from gpubench import frames, record, tables
from gpubench.v1 import collector_pb2

GIB = 1024**3


def _stored_run() -> collector_pb2.StoredRun:
    """A B0 run on a Tesla T4 shaped like the protocol's published one."""
    run = record.new_run(label="colab")
    run.config.model = "B0"
    run.config.image_size = 224
    run.config.batch_per_gpu = 128
    run.config.global_batch = 128
    run.config.gpu_count = 1
    run.config.precision = "float32"
    run.config.batch_choice = record.BatchChoice.BATCH_CHOICE_GIVEN
    run.config.train_images = 1709
    run.config.validation_images = 427
    run.config.dataset_name = "rps"
    run.software.backend = "tensorflow"
    run.software.backend_version = "2.21.0"
    gpu = run.gpus.add(index=0, name="Tesla T4", memory_total_bytes=16 * GIB)
    gpu.driver_version = "525.85.12"
    run.result.status = record.RunStatus.RUN_STATUS_OK
    run.result.epochs.add(number=1, wall_seconds=67.0, energy_joules=4200.0)
    run.result.epochs.add(number=2, wall_seconds=17.0, energy_joules=1150.0)
    run.result.epoch2_seconds = 17.0
    run.result.train_images_per_second = 100.5
    run.result.energy_per_epoch_joules = 1150.0
    run.result.memory.add(
        gpu_index=0, allocator_peak_bytes=12 * GIB, process_peak_bytes=13 * GIB,
        memory_total_bytes=16 * GIB,
    )  # fmt: skip
    run.result.batch_trials.add(batch=256, fits=False, message="OOM when allocating tensor")
    stored = collector_pb2.StoredRun(run=run, submitter="lab", content_sha256="ab" * 32)
    stored.received_at.FromSeconds(1_750_000_000)
    return stored


def _compare_response() -> collector_pb2.CompareResponse:
    response = collector_pb2.CompareResponse(
        model="B7",
        baseline="1x NVIDIA GeForce GTX 1070",
        backend="tensorflow",
        precision="float32",
        image_size=600,
        benchmark_version="1",
        warnings=["1x Tesla T4 has only 1 run"],
    )
    response.groups.add(
        gpu_name="NVIDIA RTX 6000 Ada Generation", gpu_count=2, runs=3, epoch2_median_seconds=80.0,
        epoch2_min_seconds=78.5, epoch2_max_seconds=83.0, train_images_per_second_median=21.4,
        max_batch_per_gpu=10, max_global_batch=20, peak_memory_median_bytes=45 * GIB,
        memory_total_bytes=48 * GIB, peak_memory_share=45 / 48,
        energy_per_epoch_median_joules=48_000.0, images_per_joule=1709 / 48_000.0,
        speedup=11.25, outliers_excluded=1, submitters=2,
    )  # fmt: skip
    response.groups.add(
        gpu_name="NVIDIA GeForce GTX 1070", gpu_count=1, runs=1, epoch2_median_seconds=900.0,
        epoch2_min_seconds=900.0, epoch2_max_seconds=900.0, train_images_per_second_median=1.9,
        max_batch_per_gpu=1, max_global_batch=1, speedup=1.0, is_baseline=True,
    )  # fmt: skip
    return response


def test_run_row_flattens_with_units() -> None:
    stored = _stored_run()
    row = frames.flat_run(stored)
    assert set(row) == set(frames.FLAT_RUN_COLUMNS)
    assert row["gpu_config"] == "1x Tesla T4"
    assert row["epoch1_s"] == 67.0 and row["epoch2_s"] == 17.0
    assert row["peak_memory_gib"] == pytest.approx(12.0)
    assert row["peak_memory_share"] == pytest.approx(0.75)
    assert row["process_peak_memory_gib"] == pytest.approx(13.0)
    assert math.isnan(row["device_peak_memory_gib"])  # not measured, not zero
    assert math.isnan(row["mean_power_w"])
    assert row["status"] == "ok" and row["batch_choice"] == "given"
    assert row["received_at"] == pd.Timestamp(1_750_000_000, unit="s", tz="UTC")


def test_runs_frame_keeps_columns_when_empty() -> None:
    frame = frames.runs_frame([])
    assert list(frame.columns) == frames.FLAT_RUN_COLUMNS and frame.empty
    assert str(frame["created_at"].dtype).startswith("datetime64")


def test_runs_frame_json_records_are_plain() -> None:
    frame = frames.runs_frame([_stored_run()])
    records = frames.frame_records(frame)
    text = json.dumps(records)  # NaN would not be valid JSON
    assert "NaN" not in text
    assert records[0]["received_at"].startswith("2025-06-15T15:06:40")
    assert records[0]["mean_power_w"] is None
    assert records[0]["gpu_count"] == 1


def test_compare_frame_columns_and_attrs() -> None:
    frame = frames.compare_frame(_compare_response())
    assert list(frame.columns) == frames.COMPARE_COLUMNS
    first, baseline = frame.iloc[0], frame.iloc[1]
    assert first["gpu_config"] == "2x NVIDIA RTX 6000 Ada Generation"
    assert first["peak_memory_median_gib"] == pytest.approx(45.0)
    assert first["speedup"] == 11.25 and bool(baseline["is_baseline"])
    assert math.isnan(baseline["energy_per_epoch_j"])  # not measured on that card
    assert frame.attrs["baseline"] == "1x NVIDIA GeForce GTX 1070"
    assert frame.attrs["warnings"] == ["1x Tesla T4 has only 1 run"]
    # The comparison key on every row: a group-by over a download never mixes runs.
    assert set(frames.SHARED) <= set(frame.columns)
    assert (first["backend"], first["precision"], first["image_size"]) == ("tensorflow",
                                                                            "float32", 600)
    assert (first["timed_batch_per_gpu"], first["timed_global_batch"]) == (10, 20)
    document = frames.compare_document(frame)
    assert json.loads(json.dumps(document))["groups"][1]["energy_per_epoch_j"] is None


def test_frame_attrs_are_plain_so_parquet_keeps_them(tmp_path) -> None:
    frame = frames.compare_frame(_compare_response())
    json.dumps(frame.attrs)  # nothing but plain values
    path = tmp_path / "compare.parquet"
    frame.to_parquet(path)
    back = pd.read_parquet(path)
    assert back.attrs["baseline"] == "1x NVIDIA GeForce GTX 1070"
    assert list(back.columns) == frames.COMPARE_COLUMNS


def test_csv_neutralises_cells_a_spreadsheet_would_run() -> None:
    frame = frames.runs_frame([_stored_run()])
    hostile = ["=cmd|' /C calc'!A0", "+1+2", "-2+3", "@SUM(A1)", "\tTAB", "\rCR"]
    frame = pd.concat([frame] * len(hostile), ignore_index=True)
    frame["label"] = hostile
    back = pd.read_csv(io.StringIO(frames.csv_text(frame)), keep_default_na=False)
    assert list(back["label"]) == ["'" + text for text in hostile]
    # Numbers stay numbers, and plain text as it is.
    assert list(back["epoch2_s"]) == [17.0] * len(hostile)
    assert set(back["gpu_name"]) == {"Tesla T4"}


def test_peak_memory_is_a_share_of_the_memory_limit() -> None:
    stored = _stored_run()
    stored.run.config.memory_limit_bytes = 16 * GIB
    stored.run.gpus[0].memory_total_bytes = 140 * GIB
    stored.run.result.memory[0].memory_total_bytes = 140 * GIB
    stored.run.result.memory[0].allocator_peak_bytes = int(13.2 * GIB)
    row = frames.flat_run(stored)
    assert row["peak_memory_share"] == pytest.approx(13.2 / 16)  # not 13.2 / 140
    assert row["gpu_config"] == "1x Tesla T4 as 16 GiB"
    text = "\n".join(_render(t) for t in tables.run_tables(stored))
    assert "13.2 GiB (82% of limit)" in text


def _render(table: object) -> str:
    out = io.StringIO()
    Console(file=out, width=220).print(table)
    return out.getvalue()


def test_compare_table_marks_baseline_and_units() -> None:
    text = _render(tables.compare_table(frames.compare_frame(_compare_response())))
    assert "B7 · tensorflow · float32 · 600 px · benchmark 1" in text
    assert "2x NVIDIA RTX 6000 Ada Generation" in text
    assert "1x NVIDIA GeForce GTX 1070  (baseline)" in text
    assert "80.0 [78.5-83.0]" in text
    assert "20 (2x10)" in text and "timed batch" in text and "largest batch" in text
    assert "45.0 GiB (94%)" in text
    assert "48.0 kJ" in text
    assert "11.2x" in text and "1.00x" in text
    assert "3/2 (+1 outlier)" in text and "runs/submitters" in text


def test_run_tables_show_epochs_and_trials() -> None:
    text = "\n".join(_render(t) for t in tables.run_tables(_stored_run()))
    assert "1x Tesla T4" in text and "12.0 GiB (75%)" in text
    assert "OOM when allocating tensor" in text
    assert "4.20 kJ" in text  # epoch 1's energy


def test_gpu_names_with_brackets_are_not_markup() -> None:
    frame = frames.runs_frame([_stored_run()])
    frame.loc[0, "gpu_config"] = "1x GPU [bold]x[/bold]"
    assert "1x GPU [bold]x[/bold]" in _render(tables.runs_table(frame))


def test_the_python_client_loads_no_rendering() -> None:
    # A notebook's `from gpubench.client import Client` pays for pandas, not for the CLI's tables.
    import subprocess
    import sys

    code = "import sys, gpubench.client; print(sorted(m for m in sys.modules if m == 'rich'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_a_run_of_an_unrecognised_gpu_is_listed_as_such() -> None:
    stored = _stored_run()
    stored.flagged = stored.gpu_unrecognised = True
    stored.flag_reasons.append("unrecognised GPU 'NVIDIA H2OO': looks like the catalogued H200")
    text = _render(tables.runs_table(frames.runs_frame([stored])))
    assert "(unrecognised GPU)" in " ".join(text.split())
