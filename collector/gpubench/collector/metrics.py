"""The collector's figures as Prometheus metrics: served by the collector itself
(`serve --metrics-port`), and by the results site from the collector's Stats call.

The families are made here once from a StatsResponse, so both expositions name and
describe them alike. Every refusal reason is exported from the start, at 0 until it
happens, so a rate over it (an alert on "token" refusals) has a series to work with.
Both answer Prometheus's text format or OpenMetrics, as the scraper's Accept header asks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from gpubench.collector.stats import REFUSAL_REASONS
from gpubench.errors import ExitCode, GpubenchError
from gpubench.v1 import collector_pb2

log = logging.getLogger(__name__)


# The figures of a StatsResponse that are one number each: (kind, name, help, field).
_SINGLE = (
    (CounterMetricFamily, "gpubench_collector_submissions",
     "Runs acknowledged since the collector started.", "submissions_accepted"),
)
# Runs stored, by kind: (label, field).
_RUN_KINDS = (("stored", "runs_stored"), ("flagged", "runs_flagged"),
              ("outlier", "runs_outlier"), ("published", "runs_published"))


def families(up: bool, stats: collector_pb2.StatsResponse | None) -> list[Metric]:
    """The collector's state as metric families: `up` (it can store runs durably: its
    health service says SERVING), the rest from a StatsResponse (None: none to read)."""
    found: list[Metric] = [
        GaugeMetricFamily("gpubench_collector_up",
                          "1 when the collector's health service answers SERVING.",
                          value=1.0 if up else 0.0)]
    if stats is None:
        return found
    found += [kind(name, text, value=getattr(stats, field)) for kind, name, text, field in _SINGLE]
    refusals = CounterMetricFamily(
        "gpubench_collector_refusals",
        "Submissions refused since the collector started, by reason.", labels=["reason"])
    counts = {reason: 0 for reason in REFUSAL_REASONS}
    counts.update(stats.refusals)
    for reason, count in sorted(counts.items()):
        refusals.add_metric([reason], count)
    runs = GaugeMetricFamily("gpubench_collector_runs", "Runs stored, by kind.",
                             labels=["kind"])
    for kind_label, field in _RUN_KINDS:
        runs.add_metric([kind_label], getattr(stats, field))
    return [*found, refusals, runs]


class Source(Collector):
    """Metric families computed afresh on every scrape by `read`."""

    def __init__(self, read: Callable[[], Iterable[Metric]]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        return self._read()


def exposition(registry: CollectorRegistry, accept: str) -> tuple[bytes, str]:
    """The registry's metrics in the format an Accept header asks for (OpenMetrics when
    it names application/openmetrics-text, else Prometheus's text), and its type."""
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type


@dataclass
class MetricsServer:
    """The collector's own /metrics, on an HTTP port of its own; `stop()` ends it."""

    port: int
    _server: object
    _thread: threading.Thread

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        self._server.shutdown()  # type: ignore[attr-defined]
        self._server.server_close()  # type: ignore[attr-defined]
        self._thread.join(timeout=10)


def serve_store_metrics(store: object, host: str, port: int) -> MetricsServer:
    """Serve `store`'s figures (collector.store.Store) as /metrics on host:port (0: any
    free port), on a thread; a port that cannot be bound is an error saying which."""
    from gpubench.collector.stats import stats_message

    def read() -> list[Metric]:
        up = store.durability.trouble is None  # type: ignore[attr-defined]
        try:
            stats = stats_message(store)
        except Exception as exc:  # a failing database: up is what still answers
            log.warning("metrics: cannot read the store's figures: %s", exc)
            return families(False, None)
        return families(up, stats)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Source(read))
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise GpubenchError(f"--metrics-port: cannot listen on {host}:{port} "
                            f"({exc.strerror or exc})", exit_code=ExitCode.USAGE) from None
    return MetricsServer(server.server_port, server, thread)
