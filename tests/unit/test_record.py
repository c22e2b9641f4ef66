"""The run record: JSON round trip, schema versions, hashing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpubench import record
from gpubench.errors import InvalidRecord
from gpubench.versions import SCHEMA_VERSION


def test_new_run_has_identity_and_versions() -> None:
    a, b = record.new_run(), record.new_run()
    assert a.run_id != b.run_id
    assert a.schema_version == SCHEMA_VERSION
    assert a.created_at.seconds > 1_700_000_000


def test_json_round_trip_keeps_content_hash() -> None:
    run = record.new_run(label="lab")
    run.config.model = "B0"
    run.result.epoch2_seconds = 5.0
    run.result.status = record.RunStatus.RUN_STATUS_OK
    again = record.from_json(record.to_json(run), source="x.json")
    assert again == run
    assert record.content_sha256(again) == record.content_sha256(run)


def test_newer_schema_is_refused_with_the_field_named() -> None:
    data = record.to_dict(record.new_run())
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(InvalidRecord, match="spool/a.json: schema_version"):
        record.from_dict(data, source="spool/a.json")


def test_unknown_field_is_refused() -> None:
    data = record.to_dict(record.new_run())
    data["no_such_field"] = 1
    with pytest.raises(InvalidRecord, match="no_such_field"):
        record.from_json(json.dumps(data), source="r")


def test_names() -> None:
    assert record.status_name(record.RunStatus.RUN_STATUS_OUT_OF_MEMORY) == "out_of_memory"
    assert record.gpu_config_name("Tesla T4", 1) == "1x Tesla T4"
    assert record.gpu_config_name("", 0) == "CPU"


def test_the_median_step_rate_stands_beside_the_epoch_rate() -> None:
    # The H200's fastest B0 (bf16, batch 512, CUDA graphs): 1709 images are 3 full steps
    # and a partial one, so the epoch trains more slowly than its median step.
    results = Path(__file__).resolve().parents[2] / "docs" / "results"
    data = json.loads((results / "h200-agent-runs" / "call6-graphs-b0.json").read_text())
    run = record.from_dict(data[0] if isinstance(data, list) else data)
    step = record.step_images_per_second(run)
    assert step == run.config.global_batch / run.result.step_time_median_seconds
    assert step > 1.4 * run.result.train_images_per_second
    run.result.step_time_median_seconds = 0
    assert record.step_images_per_second(run) == 0.0
