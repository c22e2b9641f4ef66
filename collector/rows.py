"""A submission's runs-table row and its acknowledgement: pure Python, no database.

Both the store and the front-end processes (collector.frontend) build rows with
`run_row`; a front-end does so before forwarding a submission, so the process
that owns the database spends no time on protobuf fields. Kept free of DuckDB and
Arrow imports so that front-ends start fast and stay small.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from gpubench import record
from gpubench.v1 import collector_pb2, run_pb2


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


# The config options that change how the network is computed or fed (and so a run's
# speed), in the order `settings_label` names them, with their names there.
SETTINGS_OPTIONS = (
    ("batched_augmentation", "batched-augmentation"),
    ("fused_batchnorm", "fused-batchnorm"),
    ("channels_first", "channels-first"),
    ("data_on_device", "data-on-device"),
    ("jit_compile", "jit"),
)
# The torch backend's own kernels: named together as "kernels" when all three are on.
KERNELS = ("batched-augmentation", "fused-batchnorm", "channels-first")
KERAS = "keras"  # no option on: Keras's own code path (every TensorFlow run, older runs)


def settings_label(config: run_pb2.Config) -> str:
    """How a run computed and fed the network: the names of the options that were on,
    in SETTINGS_OPTIONS' order, joined with "+".

    All three KERNELS read as the single word "kernels", written first
    ("kernels+data-on-device"); no option on reads "keras". Runs of different labels
    are timed differently and are never compared as one (Compare's `settings`). The
    same label as bench/scaling_table.py's settings_label.
    """
    used = [label for option, label in SETTINGS_OPTIONS if getattr(config, option)]
    if all(kernel in used for kernel in KERNELS):
        used = ["kernels"] + [label for label in used if label not in KERNELS]
    return "+".join(used) or KERAS


def _every_settings_label() -> frozenset[str]:
    labels = set()
    for mask in range(1 << len(SETTINGS_OPTIONS)):
        config = run_pb2.Config(
            **{option: bool(mask >> i & 1) for i, (option, _) in enumerate(SETTINGS_OPTIONS)}
        )
        labels.add(settings_label(config))
    return frozenset(labels)


# Every label settings_label can give (what Compare's `settings` filter accepts).
SETTINGS_LABELS = _every_settings_label()


def run_row(run: run_pb2.Run, submitter: str) -> dict[str, Any]:
    """The runs-table row of a (validated) run; received_at is filled in at commit."""
    cfg, res = run.config, run.result
    gpus = list(run.gpus)
    # A run on unlike cards (rare) is its own configuration: "A + B".
    names = list(dict.fromkeys(g.name for g in gpus[: cfg.gpu_count]))
    totals = [g.memory_total_bytes for g in gpus if g.memory_total_bytes] + [
        m.memory_total_bytes for m in res.memory if m.memory_total_bytes
    ]
    peaks = [m.allocator_peak_bytes for m in res.memory if m.allocator_peak_bytes]
    ok = res.status == run_pb2.RUN_STATUS_OK
    energy = res.energy_per_epoch_joules if res.energy_per_epoch_joules > 0 else None
    # Serialised once: the stored record and its hash (what record.content_sha256 computes).
    blob = run.SerializeToString(deterministic=True)
    return {
        "run_id": run.run_id,
        "content_sha256": hashlib.sha256(blob).hexdigest(),
        "submitter": submitter,
        "received_at": None,
        "created_at": run.created_at.ToDatetime() if run.HasField("created_at") else None,
        "schema_version": run.schema_version,
        "benchmark_version": run.benchmark_version,
        "label": run.label,
        "status": record.status_name(res.status),
        "model": cfg.model,
        "backend": run.software.backend,
        "precision": cfg.precision,
        "image_size": cfg.image_size,
        "gpu_name": " + ".join(names),
        "gpu_count": cfg.gpu_count,
        "batch_per_gpu": cfg.batch_per_gpu,
        "global_batch": cfg.global_batch,
        "train_images": cfg.train_images,
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
        "outlier": False,
        "outlier_score": 0.0,
        "record": blob,
        "settings": settings_label(cfg),
    }
