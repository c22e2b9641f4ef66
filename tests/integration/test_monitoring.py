"""The Grafana dashboard and the Prometheus alert rules of docs/monitoring load: promtool
checks the rules and runs their unit tests, parses every query of the dashboard, and
every metric they name is one the collector or the results site exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpubench.collector import metrics
from gpubench.collector.web.metrics import SiteMetrics
from gpubench.v1 import collector_pb2

FOLDER = Path(__file__).resolve().parents[2] / "docs" / "monitoring"
# promtool on PATH, else where `make test-e2e` unpacks it (`make promtool`: Debian's package,
# downloaded into .tools/, no server installed).
FETCHED = FOLDER.parents[1] / ".tools" / "prometheus" / "usr" / "bin" / "promtool"
PROMTOOL = shutil.which("promtool") or (str(FETCHED) if FETCHED.is_file() else None)
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not on PATH nor in .tools/ (`make promtool` "
                             "fetches it there)")


def _exported() -> set[str]:
    """Every sample name the collector's /metrics and the site's expose."""
    registry = CollectorRegistry(auto_describe=False)
    stats = collector_pb2.StatsResponse()
    registry.register(metrics.Source(lambda: metrics.families(True, stats)))
    site = SiteMetrics()
    site.observe("overview", 200, 0.0)
    text = generate_latest(registry).decode() + generate_latest(site.registry).decode()
    return set(re.findall(r"^(\w+)(?:\{| )", text, re.MULTILINE)) | {"up"}


def _named(expression: str) -> set[str]:
    return set(re.findall(r"\b(gpubench_\w+)", expression))


def _dashboard_queries() -> list[str]:
    dashboard = json.loads((FOLDER / "grafana-dashboard.json").read_text())
    assert dashboard["uid"] and dashboard["panels"]
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert all(queries)
    return queries


def test_every_metric_named_is_exported() -> None:
    exported = _exported()
    rules = (FOLDER / "alerts.yaml").read_text()
    for where, expression in [*(("dashboard", q) for q in _dashboard_queries()),
                              ("alerts.yaml", rules)]:
        unknown = _named(expression) - exported
        assert not unknown, f"{where} names metrics nobody exports: {sorted(unknown)}"
    # What the alerts are for: the collector down, or unable to store runs.
    for alert in ("GpubenchCollectorDown", "GpubenchCollectorNotServing"):
        assert f"alert: {alert}" in rules


@pytest.mark.e2e  # a fetched Debian tool: make test-e2e
@needs_promtool
def test_promtool_checks_the_rules_and_their_unit_tests() -> None:
    checked = subprocess.run([PROMTOOL, "check", "rules", "alerts.yaml"], cwd=FOLDER,
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([PROMTOOL, "test", "rules", "alerts.test.yaml"], cwd=FOLDER,
                            capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


@pytest.mark.e2e  # a fetched Debian tool: make test-e2e
@needs_promtool
def test_promtool_parses_every_query_of_the_dashboard(tmp_path: Path) -> None:
    # Each query as a recording rule: `promtool check rules` parses its PromQL.
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for number, query in enumerate(_dashboard_queries()):
        lines += [f"      - record: dashboard:query{number}", f"        expr: {json.dumps(query)}"]
    rules = tmp_path / "dashboard-queries.yaml"
    rules.write_text("\n".join(lines) + "\n")
    checked = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # A broken query would fail: the check is real.
    rules.write_text("\n".join([*lines, '      - record: dashboard:broken',
                                '        expr: "sum(rate(gpubench_collector_up[5m])"']) + "\n")
    broken = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True,
                            text=True, timeout=60)
    assert broken.returncode != 0
