"""A submission's runs-table row and its acknowledgement: pure Python, no database.

The store builds a submission's row with `run_row` and answers with its `Ack`; a
restore makes each backed-up run's row the same way (collector.backup_tables).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from gpubench import comparison_key, gpu_busy, record
from gpubench.collector import plausibility
from gpubench.v1 import collector_pb2, run_pb2

# How the flag reasons of a run are joined in the runs table's one text column.
REASON_SEPARATOR = "\n"


@dataclass(frozen=True)
class Ack:
    """What a submission is acknowledged with; the same for every resubmission."""

    run_id: str
    received_at: datetime  # UTC, naive
    content_sha256: str


def ack_message(ack: Ack) -> collector_pb2.SubmitRunResponse:
    """An acknowledgement as the wire's SubmitRunResponse."""
    response = collector_pb2.SubmitRunResponse(run_id=ack.run_id, content_sha256=ack.content_sha256)
    response.received_at.FromDatetime(ack.received_at)
    return response


def utc_now() -> datetime:
    """Now in UTC as a naive datetime at microsecond precision (what the store keeps)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def largest_batch_per_gpu(run: run_pb2.Run) -> int:
    """The memory answer: the largest batch per GPU the run's search confirmed; for a
    record of schema 1 whose batch was searched, that batch itself (the search's
    answer); 0 when there was no search."""
    found = run.result.largest_batch_per_gpu
    cfg = run.config
    if not found and not cfg.batch_rule and cfg.batch_choice == run_pb2.BATCH_CHOICE_SEARCHED:
        return cfg.batch_per_gpu
    return found


def flag_reasons(run: run_pb2.Run) -> list[str]:
    """Why a run is flagged (empty: it is not): it is implausible, its GPU mostly waited
    through the measured epoch (gpubench.gpu_busy), or (a run stored before the checks
    existed) it contradicts itself."""
    idle = gpu_busy.idle_gpu_warning(run)
    return plausibility.implausibilities(run) + ([f"host-bound: {idle}"] if idle else []) + [
        f"inconsistent: {name}: {why}" for name, why in plausibility.inconsistencies(run)
    ]


def run_row(run: run_pb2.Run, submitter: str) -> dict[str, Any]:
    """The runs-table row of a (validated) run; received_at is filled in at commit."""
    cfg, res = run.config, run.result
    gpus = list(run.gpus)
    # A run on unlike cards (rare) is its own configuration: "A + B". Names are filed
    # normalised, so that "Tesla T4 " is the same GPU as "Tesla T4".
    names = list(dict.fromkeys(record.normalize_gpu_name(g.name) for g in gpus[: cfg.gpu_count]))
    totals = [g.memory_total_bytes for g in gpus if g.memory_total_bytes] + [
        m.memory_total_bytes for m in res.memory if m.memory_total_bytes
    ]
    peaks = [m.allocator_peak_bytes for m in res.memory if m.allocator_peak_bytes]
    ok = res.status == run_pb2.RUN_STATUS_OK
    energy = res.energy_per_epoch_joules if res.energy_per_epoch_joules > 0 else None
    # Serialised once: the stored record and its hash (what record.content_sha256 computes).
    blob = run.SerializeToString(deterministic=True)
    reasons = flag_reasons(run)
    return {
        # Every dimension of the comparison key, a column each.
        **comparison_key.values_of(run),
        "run_id": run.run_id,
        "content_sha256": hashlib.sha256(blob).hexdigest(),
        "submitter": submitter,
        "received_at": None,
        "created_at": run.created_at.ToDatetime() if run.HasField("created_at") else None,
        "schema_version": run.schema_version,
        "label": run.label,
        "status": record.status_name(res.status),
        "model": cfg.model,
        "gpu_name": " + ".join(names),
        "gpu_count": cfg.gpu_count,
        "batch_per_gpu": cfg.batch_per_gpu,
        "global_batch": cfg.global_batch,
        "epoch2_seconds": res.epoch2_seconds if ok and res.epoch2_seconds > 0 else None,
        "train_images_per_second": (
            res.train_images_per_second if ok and res.train_images_per_second > 0 else None
        ),
        "peak_memory_bytes": max(peaks) if peaks else None,
        "memory_total_bytes": min(totals) if totals else None,
        "energy_per_epoch_joules": energy,
        "images_per_joule": (
            cfg.train_images / energy if ok and energy and cfg.train_images else None
        ),
        "record": blob,
        "largest_batch_per_gpu": largest_batch_per_gpu(run),
        "memory_limit_bytes": cfg.memory_limit_bytes,
        "published": run.published,
        "flagged": bool(reasons),
        "flag_reasons": REASON_SEPARATOR.join(reasons),
    }
