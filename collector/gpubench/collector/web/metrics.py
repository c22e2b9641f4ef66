"""/metrics in Prometheus's text format: the site's own traffic and the collector's state.

The site counts its requests and the refusals the collector answered it with. What
only the collector knows (submissions, refusals by reason, runs stored and flagged)
it reads on each scrape from the collector's health service and its Stats call
(collector.stats), made into metric families by collector.metrics, as the collector's
own /metrics does; a collector that cannot be asked shows as gpubench_collector_up 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import Metric

from gpubench.collector import metrics as collector_metrics

# The collector's state, from its Stats call, named as the collector's own /metrics does.
collector_families = collector_metrics.families


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
        self.registry.register(collector_metrics.Source(source))

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """Every metric, in the format the scraper's Accept header asks for (OpenMetrics
        or Prometheus's text), and its content type."""
        return collector_metrics.exposition(self.registry, accept)
