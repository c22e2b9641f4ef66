"""/metrics in Prometheus's text format: the site's own traffic and the collector's state.

The site counts its requests and the refusals the collector answered it with. What
only the collector knows (submissions, refusals by reason, flagged and quarantined
runs, the journal's depth, DuckDB's flush latency) it reads on each scrape from the
collector's health service and its Stats call (collector.stats), through
`CollectorStats`; a collector that cannot be asked shows as gpubench_collector_up 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class SiteMetrics:
    """The site's metrics in a registry of its own (several sites can share a process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "gpubench_site_requests", "Pages served, by page and HTTP status.",
            ["page", "status"], registry=self.registry)
        self.latency = Histogram(
            "gpubench_site_request_seconds", "Time to answer a page, collector calls included.",
            ["page"], registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.collector_refusals = Counter(
            "gpubench_site_collector_refusals",
            "Calls of the site the collector refused, by gRPC status (FAILED_PRECONDITION: "
            "unlike runs a comparison would have mixed; UNAUTHENTICATED: no or a bad token).",
            ["code"], registry=self.registry)

    def observe(self, page: str, status: int, started: float) -> None:
        """Count one answered request of `page` begun at monotonic time `started`."""
        self.requests.labels(page=page, status=str(status)).inc()
        self.latency.labels(page=page).observe(time.monotonic() - started)

    def add_source(self, source: Callable[[], Iterable[Metric]]) -> None:
        """Metrics computed on every scrape by `source` (the collector's state)."""

        class _Source(Collector):
            def collect(self) -> Iterable[Metric]:
                return source()

        self.registry.register(_Source())

    def exposition(self) -> bytes:
        """Every metric in Prometheus's text format."""
        return generate_latest(self.registry)


def collector_families(up: bool, stats: object | None) -> list[Metric]:
    """The collector's state as metric families: `up` from its health service, the rest
    from a StatsResponse (None: the collector gave none)."""
    families: list[Metric] = [
        GaugeMetricFamily("gpubench_collector_up",
                          "1 when the collector's health service answers SERVING.",
                          value=1.0 if up else 0.0)]
    if stats is None:
        return families
    submissions = CounterMetricFamily(
        "gpubench_collector_submissions", "Runs acknowledged since the collector started.",
        value=stats.submissions_accepted)  # type: ignore[attr-defined]
    refusals = CounterMetricFamily(
        "gpubench_collector_refusals",
        "Submissions refused since the collector started, by reason.", labels=["reason"])
    for reason, count in sorted(stats.refusals.items()):  # type: ignore[attr-defined]
        refusals.add_metric([reason], count)
    runs = GaugeMetricFamily("gpubench_collector_runs", "Runs stored, by kind.",
                             labels=["kind"])
    runs.add_metric(["stored"], stats.runs_stored)  # type: ignore[attr-defined]
    runs.add_metric(["flagged"], stats.runs_flagged)  # type: ignore[attr-defined]
    runs.add_metric(["outlier"], stats.runs_outlier)  # type: ignore[attr-defined]
    runs.add_metric(["published"], stats.runs_published)  # type: ignore[attr-defined]
    quarantined = GaugeMetricFamily(
        "gpubench_collector_quarantined_runs",
        "Runs acknowledged but refused by the database, held in quarantine.",
        value=stats.runs_quarantined)  # type: ignore[attr-defined]
    journal = GaugeMetricFamily(
        "gpubench_collector_journal_depth",
        "Acknowledged runs waiting in the intake journal for their bulk insert.",
        value=stats.journal_depth)  # type: ignore[attr-defined]
    flushes = CounterMetricFamily(
        "gpubench_collector_flushes", "Bulk inserts from the journal into DuckDB.",
        value=stats.flushes)  # type: ignore[attr-defined]
    flush_seconds = CounterMetricFamily(
        "gpubench_collector_flush_seconds",
        "Time spent in bulk inserts into DuckDB, in all (over flushes: the mean latency).",
        value=stats.flush_seconds_total)  # type: ignore[attr-defined]
    last_flush = GaugeMetricFamily(
        "gpubench_collector_last_flush_seconds", "The latest bulk insert's duration.",
        value=stats.flush_seconds_last)  # type: ignore[attr-defined]
    return [*families, submissions, refusals, runs, quarantined, journal, flushes,
            flush_seconds, last_flush]
