"""The collector calls the site's pages make, through gpubench.client.Client only.

The site reads with its own token (--token-file), or none, which a collector without
--public-read refuses; with `visitor_tokens`, a request's own token
(`Authorization: Bearer ...`) goes first. Only read calls are made here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from gpubench import frames, record
from gpubench.client import Client
from gpubench.v1 import collector_pb2

# Clients kept for tokens that requests carried (one channel each), most recent first.
MAX_CLIENTS = 16
# Runs a GPU page reads at most (the newest, one page of the collector's ListRuns): it
# says so when the GPU has more, and /runs?gpu=... pages through them all. A popular
# card's page then costs what a page of its runs costs, however many it has
# (bench/collector_scale.py --site times it).
GPU_PAGE_RUNS = 500


@dataclass(frozen=True)
class SiteConfig:
    """Where the collector is and how the site reaches it."""

    address: str
    token: str | None = None  # the site's own token; None: tokenless reads
    # Read with the token a request carries, when it carries one. Off by default: every
    # wrong token a visitor sends counts against the collector's limit of failed
    # authentications for the site's address (past the limit, wrong tokens are refused
    # for a while; valid ones and the site's own reads never are).
    visitor_tokens: bool = False
    ca: Path | None = None
    tls: bool = False
    timeout: float = 10.0


@dataclass
class LeaderboardRow:
    """A leaderboard entry with the figures of its runs' comparison group."""

    entry: collector_pb2.LeaderboardEntry
    group: collector_pb2.CompareGroup | None  # None: the collector gave no figures

    @property
    def config_name(self) -> str:
        """'1x NVIDIA H200'."""
        return record.gpu_config_name(self.entry.gpu_name, self.entry.gpu_count)

    @property
    def largest_batch(self) -> int:
        """The largest batch per GPU a search of the entry's runs confirmed (0: none)."""
        return (self.group.largest_batch_per_gpu_max if self.group else 0) or \
            self.entry.largest_batch_per_gpu_max


@dataclass
class Leaderboard:
    """One model's leaderboard as the site shows it."""

    response: collector_pb2.LeaderboardResponse
    rows: list[LeaderboardRow] = field(default_factory=list)
    # The entries of cards not yet in the GPU catalogue (response.uncatalogued): apart.
    uncatalogued: list[LeaderboardRow] = field(default_factory=list)


class Reader:
    """The collector as the site reads it: one channel per token, reused across requests."""

    def __init__(self, config: SiteConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._clients: OrderedDict[str | None, Client] = OrderedDict()

    def client(self, request_token: str | None = None) -> Client:
        """The client for a request: its own token if it carried one, else the site's."""
        token = request_token or self.config.token
        with self._lock:
            client = self._clients.get(token)
            if client is None:
                client = self._clients[token] = Client(
                    self.config.address, token=token or "", ca=self.config.ca,
                    tls=self.config.tls, timeout=self.config.timeout)
            self._clients.move_to_end(token, last=False)
            while len(self._clients) > MAX_CLIENTS:  # the least recently used go
                self._clients.popitem()[1].close()
            return client

    def close(self) -> None:
        """Close every channel."""
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()


def leaderboard(client: Client, model: str, *, settings: str, batch_rule: str,
                precision: str, backend: str, include_flagged: bool,
                corroborated_only: bool = False, limit: int = 100) -> Leaderboard:
    """`model`'s leaderboard, each entry with its spread, memory, energy and img/J.

    The Leaderboard call ranks; a Compare call per way of running among the entries
    (backend, precision, pipeline, weights, data, epochs), pinned to the leaderboard's
    own selection (native image size, the protocol's training images, settings, batch
    rule, benchmark version), gives the figures of the same runs: both leave out
    outliers and published runs, and flagged runs unless asked for.
    """
    response = client.leaderboard_response(
        model, precision or None, limit, backend=backend or None, settings=settings or None,
        batch_rule=batch_rule or None, include_flagged=include_flagged,
        corroborated_only=corroborated_only)
    board = Leaderboard(response)
    # Each way of running among the entries: its whole comparison key (the entry's
    # dimensions, the leaderboard's selection, the standard benchmark's size).
    ways: dict[tuple, list[collector_pb2.LeaderboardEntry]] = {}
    for entry in [*response.entries, *response.uncatalogued]:
        key = frames.entry_key(response, entry)
        ways.setdefault(tuple(key.items()), []).append(entry)
    groups: dict[tuple, collector_pb2.CompareGroup] = {}
    for way, entries in ways.items():
        compared = client.compare_response(
            model, gpus=sorted({e.gpu_name for e in entries}), **dict(way),
            include_flagged=include_flagged)
        for group in [*compared.groups, *compared.uncatalogued]:
            if group.memory_limit_bytes == 0:  # the leaderboard is of whole cards
                groups[(way, group.gpu_name, group.gpu_count)] = group
    for entries, rows in ((response.entries, board.rows),
                          (response.uncatalogued, board.uncatalogued)):
        for entry in entries:
            way = tuple(frames.entry_key(response, entry).items())
            rows.append(LeaderboardRow(entry, groups.get((way, entry.gpu_name,
                                                          entry.gpu_count))))
    return board


def leaderboard_frame(board: Leaderboard) -> pd.DataFrame:
    """A leaderboard's download: gpubench.frames.leaderboard_frame's columns (the
    comparison key and both batches on every entry) and the figures the page shows
    beside them from the entry's comparison group."""
    frame = frames.leaderboard_frame(board.response)  # the ranked entries, then the others
    rows = [*board.rows, *board.uncatalogued]
    groups = [row.group for row in rows]
    figures = {
        "epoch2_min_s": [g.epoch2_min_seconds if g else 0.0 for g in groups],
        "epoch2_max_s": [g.epoch2_max_seconds if g else 0.0 for g in groups],
        "peak_memory_median_gib": [frames.to_gib(g.peak_memory_median_bytes) if g else 0.0
                                   for g in groups],
        "memory_total_gib": [frames.to_gib(g.memory_total_bytes) if g else 0.0 for g in groups],
        "peak_memory_share": [g.peak_memory_share if g else 0.0 for g in groups],
        "energy_per_epoch_j": [g.energy_per_epoch_median_joules if g else 0.0 for g in groups],
        "images_per_joule": [g.images_per_joule if g else 0.0 for g in groups],
    }
    for column, values in figures.items():
        frame[column] = [frames.measured(v) for v in values]
    frame["largest_batch_per_gpu"] = [row.largest_batch for row in rows]
    return frame


@dataclass
class GpuRuns:
    """The stored runs on one GPU model, newest first."""

    runs: list[collector_pb2.StoredRun]
    capped: bool  # the GPU has more runs than GPU_PAGE_RUNS: these are the newest


def gpu_runs(client: Client, gpu_name: str) -> GpuRuns:
    """The stored runs on GPUs named exactly `gpu_name` (as the collector files names),
    newest first, at most GPU_PAGE_RUNS."""
    wanted = record.normalize_gpu_name(gpu_name)
    runs: list[collector_pb2.StoredRun] = []
    # One page (one more run than shown says whether there are more); the collector's
    # filter is a part of the name, so a longer name's runs may come too and are left.
    for stored in client.iter_runs(gpu=wanted, page_size=GPU_PAGE_RUNS + 1):
        names = {record.normalize_gpu_name(g.name) for g in stored.run.gpus}
        if wanted in names:
            if len(runs) >= GPU_PAGE_RUNS:
                return GpuRuns(runs, capped=True)
            runs.append(stored)
    return GpuRuns(runs, capped=False)

