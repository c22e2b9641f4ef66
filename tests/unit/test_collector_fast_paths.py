"""The collector's cheap paths for the common case give the same answers as the full checks.

Validation checks groups of fields with a fast comparison and builds a field's path
only when it fails; the store inserts a group commit's rows with one statement whose
columns are named. Both must keep every rule and every value.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
from factories import make_run

from gpubench import record
from gpubench.collector import validation
from gpubench.collector.columns import RUN_COLUMNS
from gpubench.collector.rows import run_row
from gpubench.collector.store import Store
from gpubench.v1 import run_pb2

# Values that fail a ">= 0, finite" check, and the words of the problem each gets.
BAD_NUMBERS = [
    (math.nan, "must be a finite number, got nan"),
    (math.inf, "must be a finite number, got inf"),
    (-math.inf, "must be a finite number, got -inf"),
    (-0.5, "must be >= 0, got -0.5"),
]


def _only_problem(run: run_pb2.Run) -> tuple[str, str]:
    found = validation.problems(run)
    assert len(found) == 1, found
    return found[0]


def _figures(message: type) -> tuple[str, ...]:
    """The names of a message type's floating-point fields."""
    return tuple(f.name for f in message.DESCRIPTOR.fields if f.type == f.TYPE_DOUBLE)


@pytest.mark.parametrize(
    ("name", "value", "words"),
    # Start-up may be negative (epoch 2 the slower): only its non-finite values fail.
    [(name, value, words) for name in _figures(run_pb2.Result) for value, words in BAD_NUMBERS
     if not (name == "startup_seconds" and math.isfinite(value))],
)
def test_every_result_figure_is_checked(name: str, value: float, words: str) -> None:
    run = make_run()
    setattr(run.result, name, value)
    problems = validation.problems(run)
    assert (f"run.result.{name}", words) in problems


@pytest.mark.parametrize("name", _figures(run_pb2.Epoch))
@pytest.mark.parametrize(("value", "words"), BAD_NUMBERS)
def test_every_epoch_figure_is_checked(name: str, value: float, words: str) -> None:
    run = make_run()
    setattr(run.result.epochs[0], name, value)
    assert _only_problem(run) == (f"run.result.epochs[0].{name}", words)


@pytest.mark.parametrize(
    ("name", "high"),
    [("wall_seconds", validation.MAX_SECONDS), ("mean_gpu_utilization", 100),
     ("accuracy", 1), ("val_accuracy", 1)],
)
def test_epoch_upper_limits_hold(name: str, high: float) -> None:
    # A third epoch with only this figure: no other figure of it has to agree with it.
    run = make_run(config__epochs=3)
    epoch = run.result.epochs.add(number=3)
    setattr(epoch, name, high)  # the limit itself is allowed
    assert validation.problems(run) == []
    setattr(epoch, name, high * 2)
    assert _only_problem(run) == (
        f"run.result.epochs[2].{name}", f"must be <= {high:g}, got {high * 2:g}"
    )


@pytest.mark.parametrize(
    ("path", "names"),
    [("gpus[0]", validation.GPU_TEXTS), ("software", validation.SOFTWARE_TEXTS),
     ("result.epochs[1]", ("energy_source",))],
)
def test_every_short_text_is_checked(path: str, names: tuple[str, ...]) -> None:
    for name in names:
        run = make_run()
        message = {"gpus[0]": run.gpus[0], "software": run.software,
                   "result.epochs[1]": run.result.epochs[1]}[path]
        setattr(message, name, "x" * validation.SHORT)  # at the limit: fine
        assert validation.problems(run) == []
        setattr(message, name, "x" * (validation.SHORT + 1))
        assert _only_problem(run) == (
            f"run.{path}.{name}", f"longer than {validation.SHORT} characters (65)"
        )


def test_unknown_status_values_are_refused() -> None:
    run = make_run()
    run.result.status = 99
    assert ("run.result.status", "unknown value 99") in validation.problems(run)


def test_concurrent_submitters_store_every_column_and_record_byte(tmp_path: Path) -> None:
    """16 submitters at once: each run is stored as submitted."""
    runs = [make_run(gpu_name="NVIDIA H200", peak_memory_bytes=(100 + i) << 30) for i in range(8)]
    runs += [make_run(status="out_of_memory", label=f"oom {i}") for i in range(8)]
    store = Store(tmp_path / "c.duckdb")
    try:
        barrier = threading.Barrier(len(runs))

        def submit(run: run_pb2.Run) -> None:
            barrier.wait()
            store.submit(run, "lab")

        threads = [threading.Thread(target=submit, args=(run,)) for run in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert store.runs.count() == len(runs)
        names = [name for name in RUN_COLUMNS.names if name != "received_at"]
        columns = ", ".join(f'"{name}"' for name in names)
        for run in runs:
            stored = store.runs.get(run.run_id)
            assert stored.run.SerializeToString(deterministic=True) == run.SerializeToString(
                deterministic=True)
            assert stored.content_sha256 == record.content_sha256(run)
            expected = run_row(run, "lab")
            del expected["received_at"]
            row = store.database.cursor().execute(
                f"SELECT {columns} FROM runs WHERE run_id = ?", [run.run_id]
            ).fetchone()
            stored = dict(zip(names, row, strict=True))
            assert stored == expected
    finally:
        store.close()
