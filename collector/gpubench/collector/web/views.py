"""One function per page: read what the page needs from the collector, fill its template.

A view returns (template, context) or raises a gpubench error, which app.py turns into
a page that says in words what the collector answered (a refused comparison names each
way the runs differ, as the CLI does).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from google.protobuf import json_format
from gpubench.collector.validation import MAX_GPUS
from gpubench.collector.web import charts, reads

from gpubench import record
from gpubench.client import Client
from gpubench.errors import InvalidRecord
from gpubench.v1 import collector_pb2

BATCH_RULES = ("steps", "largest", "given", "quick")
# Settings labels the forms offer, the default run's first: Keras's own code path and
# those with torch's kernels all on (what the agent runs); a URL may ask for any label.
SETTINGS = (record.DEFAULT_SETTINGS,
            *sorted(s for s in record.SETTINGS_LABELS if s != record.DEFAULT_SETTINGS
                    and (s == record.KERAS or s.startswith("kernels"))))
RECENT_RUNS = 100
# A Compare refusal names each difference as "DIMENSION (VALUES; pin one with --FLAG)".
DIFFERENCE = re.compile(r"(\w+) \(([^;()]*); pin one with (--[\w-]+)\)")
# The dimensions the comparison form pins, by the collector's name for them.
FORM_FIELDS = {"settings": "Settings", "batch_rule": "Batch rule", "precision": "Precision",
               "backend": "Backend", "pipeline": "Pipeline"}


@dataclass(frozen=True)
class Difference:
    """One way the runs of a refused comparison differ."""

    dimension: str
    values: str
    pin: str  # how to pin it: the form's field, else the CLI flag


def differences(detail: str) -> list[Difference]:
    """The differences a Compare refusal names (none found: the caller shows its words)."""
    found = []
    for dimension, values, flag in DIFFERENCE.findall(detail):
        field_label = FORM_FIELDS.get(dimension)
        pin = f"choose one in {field_label} above" if field_label else \
            f"not on this page: gpubench compare {flag} ..."
        found.append(Difference(dimension.replace("_", " "), values, pin))
    return found


@dataclass(frozen=True)
class Choice:
    """A <select> of a filter form."""

    name: str
    label: str
    options: tuple[tuple[str, str], ...]  # (value, text)
    value: str


@dataclass
class Filters:
    """The filters a leaderboard or comparison was asked for (its query string)."""

    settings: str = record.DEFAULT_SETTINGS
    batch_rule: str = record.DEFAULT_BATCH_RULE
    precision: str = ""
    backend: str = ""
    pipeline: str = ""
    include_flagged: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, query: Mapping[str, str], *, any_settings: bool = False) -> Filters:
        """Read the filters from a query string; bad values are refused naming the field
        (the forms only offer good ones)."""
        def one_of(name: str, allowed: tuple[str, ...], default: str) -> str:
            value = query.get(name, default)
            if value and value not in allowed:
                raise InvalidRecord(name, f"unknown {value[:64]!r} (one of "
                                          f"{', '.join(allowed)})")
            return value

        return cls(
            settings=one_of("settings", tuple(record.SETTINGS_LABELS), record.DEFAULT_SETTINGS),
            batch_rule=one_of("batch_rule", BATCH_RULES, record.DEFAULT_BATCH_RULE),
            precision=one_of("precision", record.PRECISIONS, ""),
            backend=one_of("backend", record.BACKENDS, ""),
            pipeline=one_of("pipeline", record.PIPELINE_MODES, ""),
            include_flagged=query.get("flagged", "") in ("1", "on", "true"),
        )

    def choices(self, *, any_rule: bool, pipeline: bool) -> list[Choice]:
        """The form's selects, showing the current values."""
        any_option = (("", "any"),)
        settings = SETTINGS if self.settings in SETTINGS or not self.settings \
            else (*SETTINGS, self.settings)
        rows = [
            Choice("settings", "Settings",
                   (*(any_option if any_rule else ()), *((s, s) for s in settings)),
                   self.settings),
            Choice("batch_rule", "Batch rule",
                   (*(any_option if any_rule else ()), *((r, r) for r in BATCH_RULES)),
                   self.batch_rule),
            Choice("precision", "Precision", (*any_option, *((p, p) for p in record.PRECISIONS)),
                   self.precision),
            Choice("backend", "Backend", (*any_option, *((b, b) for b in record.BACKENDS)),
                   self.backend),
        ]
        if pipeline:
            rows.append(Choice("pipeline", "Pipeline",
                               (*any_option, *((p, p) for p in record.PIPELINE_MODES)),
                               self.pipeline))
        return rows

    def query(self, **more: str) -> str:
        """The query string of these filters (and `more`), for links."""
        values = {"settings": self.settings, "batch_rule": self.batch_rule,
                  "precision": self.precision, "backend": self.backend,
                  "pipeline": self.pipeline, **more}
        if self.include_flagged:
            values["flagged"] = "1"
        # settings and batch_rule stay even when empty: empty is "any", not the default.
        return urlencode({k: v for k, v in values.items()
                          if v or k in ("settings", "batch_rule")})


def model_of(name: str) -> str:
    """The model of a URL ('b0' or 'B0'); NotFound-like refusal for anything else."""
    model = name.upper()
    if model not in record.MODELS:
        raise InvalidRecord("model", f"unknown {name[:16]!r} (one of {', '.join(record.MODELS)})")
    return model


def gpu_url(gpu_name: str) -> str:
    """The GPU model page's address."""
    return "/gpu/" + quote(gpu_name, safe="")


def run_url(run_id: str) -> str:
    """A run's page address."""
    return "/run/" + quote(run_id, safe="")


def overview(client: Client) -> tuple[str, dict[str, Any]]:
    """The home page: each model's top configurations at the protocol's settings."""
    boards = []
    for model in record.MODELS:
        board = reads.leaderboard(client, model, settings=record.DEFAULT_SETTINGS,
                                  batch_rule=record.DEFAULT_BATCH_RULE, precision="",
                                  backend="", include_flagged=False, limit=5)
        boards.append((model, board))
    return "index.html", {"boards": boards, "default_settings": record.DEFAULT_SETTINGS}


def leaderboard(client: Client, model: str, query: Mapping[str, str]) -> tuple[str, dict]:
    """A model's leaderboard with its filters."""
    model = model_of(model)
    filters = Filters.of(query)
    board = reads.leaderboard(client, model, settings=filters.settings,
                              batch_rule=filters.batch_rule, precision=filters.precision,
                              backend=filters.backend, include_flagged=filters.include_flagged)
    # Entries that ran differently from one another say how (the collector ranks them
    # apart); one line above the table when they all ran alike.
    ways = {(r.entry.backend, r.entry.precision, r.entry.pipeline, r.entry.weights,
             r.entry.data, r.entry.epochs) for r in board.rows}
    return "leaderboard.html", {
        "model": model, "board": board, "filters": filters,
        "choices": filters.choices(any_rule=False, pipeline=False),
        "several_ways": len(ways) > 1, "native_size": record.NATIVE_IMAGE_SIZE[model],
    }


def comparison(client: Client, model: str, query: Mapping[str, str]) -> tuple[str, dict]:
    """A comparison against a baseline GPU: speedups as bars with the runs' spread, the
    table, and the published figures apart. A refusal to mix unlike runs is shown with
    the collector's words, which name each difference."""
    model = model_of(model)
    filters = Filters.of(query)
    baseline = record.normalize_gpu_name(query.get("baseline", ""))
    try:
        baseline_count = int(query.get("count", "1") or 1)
    except ValueError:
        baseline_count = 0
    if not 1 <= baseline_count <= MAX_GPUS:
        raise InvalidRecord("count", f"must be a whole number of GPUs from 1 to {MAX_GPUS}, "
                                     f"got {query.get('count', '')[:32]!r}")
    context: dict[str, Any] = {
        "model": model, "filters": filters, "baseline": baseline,
        "baseline_count": baseline_count,
        "choices": filters.choices(any_rule=True, pipeline=True),
    }
    response = client.compare_response(
        model, baseline=baseline or None, baseline_count=baseline_count,
        precision=filters.precision or None, backend=filters.backend or None,
        settings=filters.settings or None, batch_rule=filters.batch_rule or None,
        pipeline=filters.pipeline or None, include_flagged=filters.include_flagged)
    names = [record.gpu_config_name(g.gpu_name, g.gpu_count, g.memory_limit_bytes)
             for g in response.groups]
    context.update(
        response=response, names=names,
        chart=charts.speedup_chart(list(response.groups), names,
                                   f"{model}: speedup over {response.baseline}"),
        published_names=[record.gpu_config_name(g.gpu_name, g.gpu_count,
                                                g.memory_limit_bytes)
                         for g in response.published],
        baselines=sorted({(g.gpu_name, g.gpu_count) for g in response.groups}),
    )
    return "compare.html", context


def gpu(client: Client, name: str) -> tuple[str, dict[str, Any]]:
    """A GPU model's page: its runs, newest first, by model."""
    wanted = record.normalize_gpu_name(name)
    runs = reads.gpu_runs(client, wanted)
    card = next((g for s in runs for g in s.run.gpus
                 if record.normalize_gpu_name(g.name) == wanted), None)
    by_model = {m: [s for s in runs if s.run.config.model == m] for m in record.MODELS}
    return "gpu.html", {"name": wanted, "runs": runs, "card": card, "by_model": by_model}


def run(client: Client, run_id: str) -> tuple[str, dict[str, Any]]:
    """One run's full record."""
    stored = client.get_run(run_id)
    r = stored.run
    config = json_format.MessageToDict(r.config, preserving_proto_field_name=True,
                                       always_print_fields_with_no_presence=True)
    host = json_format.MessageToDict(r.host, preserving_proto_field_name=True)
    software = json_format.MessageToDict(r.software, preserving_proto_field_name=True)
    return "run.html", {
        "stored": stored, "run": r, "config": config, "host": host, "software": software,
        "status": record.status_name(r.result.status),
        "settings": record.settings_label(r.config),
        "pipeline": record.pipeline_as_run(r.config),
        "data": record.data_label(r.config),
        "config_name": record.gpu_config_name(
            record.normalize_gpu_name(r.gpus[0].name) if r.gpus else "",
            r.config.gpu_count, r.config.memory_limit_bytes),
        "created": r.created_at.ToDatetime().strftime("%Y-%m-%d %H:%M:%S UTC")
        if r.HasField("created_at") else "",
        "received": stored.received_at.ToDatetime().strftime("%Y-%m-%d %H:%M:%S UTC")
        if stored.HasField("received_at") else "",
    }


def runs(client: Client, query: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """The newest runs, filtered by model, GPU name (a part of it), backend, precision."""
    model = query.get("model", "")
    if model:
        model = model_of(model)
    backend = query.get("backend", "")
    precision = query.get("precision", "")
    if backend and backend not in record.BACKENDS:
        raise InvalidRecord("backend", f"unknown {backend[:32]!r}")
    if precision and precision not in record.PRECISIONS:
        raise InvalidRecord("precision", f"unknown {precision[:32]!r}")
    gpu_part = query.get("gpu", "")[:200]
    listed = list(reads.recent_runs(client, model=model or None, gpu=gpu_part or None,
                                    backend=backend or None, precision=precision or None,
                                    limit=RECENT_RUNS))
    return "runs.html", {"runs": listed, "model": model, "gpu": gpu_part,
                         "backend": backend, "precision": precision,
                         "limit": RECENT_RUNS}


def run_summary(stored: collector_pb2.StoredRun) -> dict[str, Any]:
    """What a runs table shows of a run (used by templates through a global)."""
    r = stored.run
    gpu_name = record.normalize_gpu_name(r.gpus[0].name) if r.gpus else ""
    return {
        "url": run_url(r.run_id), "run_id": r.run_id, "model": r.config.model,
        "gpu_name": gpu_name, "gpu_url": gpu_url(gpu_name) if gpu_name else "",
        "config": record.gpu_config_name(gpu_name, r.config.gpu_count,
                                         r.config.memory_limit_bytes),
        "created": r.created_at.ToDatetime().strftime("%Y-%m-%d %H:%M")
        if r.HasField("created_at") else "",
        "backend": r.software.backend, "precision": r.config.precision,
        "settings": record.settings_label(r.config), "batch_rule": r.config.batch_rule,
        "batch": r.config.batch_per_gpu, "epoch2": r.result.epoch2_seconds,
        "images_per_second": r.result.train_images_per_second,
        "status": record.status_name(r.result.status), "label": r.label,
        "flagged": stored.flagged, "outlier": stored.outlier, "published": r.published,
    }
