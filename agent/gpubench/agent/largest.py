"""`gpubench-agent largest-batch`: only the batch search, for each model and memory limit.

Reads the workload's `search_done` events (one per model and limit) and shows
them; nothing is trained to the end, spooled or sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpubench.agent.display import RunDisplay
from gpubench.agent.runners.base import Runner, SearchRequest
from rich.console import Console
from rich.table import Table

GIB = 1 << 30


def search_models(runner: Runner, requests: Sequence[SearchRequest],
                  display: RunDisplay) -> tuple[list[dict[str, Any]], list[str]]:
    """Run each request's search; (one row per model and limit, the models that failed)."""
    found: list[dict[str, Any]] = []
    failed: list[str] = []
    display.suite_started([request.model for request in requests], 0)
    for index, request in enumerate(requests):
        trials: list[dict[str, Any]] = []
        errors: list[str] = []
        with runner.start(request) as workload:
            display.model_started(request.model, 0, lambda: None, index)
            try:
                for event in workload.events():
                    if event.kind != "error":  # said once, below, when the search ends
                        display.event(event)
                    if event.kind == "batch_trial":
                        trials.append(dict(event.data))
                    elif event.kind == "search_done":
                        found.append({**event.data, "trials": trials})
                        trials = []
                    elif event.kind == "error":
                        errors.append(str(event.get("message") or "failed"))
            finally:
                display.model_finished()
            ended = workload.wait()
        if errors or ended.exit_code != 0:
            failed.append(request.model)
            display.note(f"{request.model}: the search failed: "
                         f"{errors[-1] if errors else 'the workload ' + ended.describe()}",
                         style="red")
    return found, failed


def print_table(rows: Sequence[dict[str, Any]], console: Console) -> None:
    """One line per model and limit; fits 80 columns."""
    table = Table(title="Largest batch per GPU")
    for column in ("model", "GPU memory", "largest", "speed run", "trials", "search"):
        table.add_column(column, justify="right" if column != "model" else "left")
    for row in rows:
        limit = int(row.get("memory_limit_bytes") or 0)
        largest = f"{row.get('largest')}" + ("+" if row.get("capped") else "")
        table.add_row(
            str(row.get("model")),
            f"{limit / GIB:.0f} GiB" if limit else "whole card",
            largest,
            str(row.get("batch")),
            str(len(row.get("trials") or ())),
            f"{float(row.get('search_seconds') or 0):.0f} s",
        )
    console.print(table)
    if any(row.get("capped") for row in rows):
        console.print("+: every training image fits in one batch; the card holds more",
                      highlight=False)
