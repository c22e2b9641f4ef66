"""The --gpu rule (gpubench.stored_runs.names_gpu: a GPU's whole name, any case) where
the collector's own filter says less: compare's --gpu and --baseline checked against the
GPUs with runs of the model, runs list's --gpu kept to the GPU it names (the collector
lists the runs whose GPU name contains it). A name no GPU with runs has is NotFound
(exit 5) naming the closest, as estimate, fit and plot say it (gpubench.answers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpubench import record, stored_runs
from gpubench.client import Client
from gpubench.errors import NotFound
from gpubench.v1 import collector_pb2

# Runs a page when every run is read for its GPU's name (an error's closest names).
NAMES_PAGE = 1000


def gpus_with_runs_of(client: Client, model: str) -> set[str]:
    """The names of the GPUs with runs of `model`: the groups of a comparison of all its
    runs (unlike ones, outliers, flagged and published ones too); none for a model
    without runs."""
    try:
        response = client.compare_response(model, allow_mixed=True, include_outliers=True,
                                           include_flagged=True)
    except NotFound:
        return set()
    return {group.gpu_name for group in (*response.groups, *response.published,
                                         *response.uncatalogued)}


def check_compared(client: Client, model: str, gpus: Sequence[str], baseline: str | None
                   ) -> None:
    """NotFound where a --gpu or the --baseline of a comparison of `model` names no GPU
    with runs of it."""
    asked = [("--gpu", gpu) for gpu in gpus] + ([("--baseline", baseline)] if baseline else [])
    if not asked:
        return
    names = gpus_with_runs_of(client, model)
    for flag, wanted in asked:
        if not any(stored_runs.names_gpu(name, wanted) for name in names):
            raise stored_runs.no_gpu_named(flag, wanted, names, f" of {model}")


def runs_on(client: Client, gpu: str, limit: int, **filters: Any
            ) -> list[collector_pb2.StoredRun]:
    """The newest `limit` runs on the GPU `gpu` names that match `filters` (those of
    Client.iter_runs); NotFound where no run at all is on a GPU of that name."""
    wanted = record.normalize_gpu_name(gpu)
    found = []
    for stored in client.iter_runs(gpu=wanted, **filters):  # names that contain it
        if stored_runs.matches_gpu(stored.run, wanted):
            found.append(stored)
            if len(found) == limit:
                break
    if found or (any(value for value in filters.values()) and any(
            stored_runs.matches_gpu(stored.run, wanted)
            for stored in client.iter_runs(gpu=wanted, page_size=NAMES_PAGE))):
        return found  # runs on that GPU, or none that the other filters keep
    names = {stored_runs.gpu_name(stored.run) for stored in client.iter_runs(
        page_size=NAMES_PAGE)}
    raise stored_runs.no_gpu_named("--gpu", gpu, names - {""})
