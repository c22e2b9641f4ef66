"""Fixtures of the results site's tests: a live collector (real gRPC server on port 0,
real DuckDB file) holding the reference runs of docs/results/runs and runs built by
tests/factories.py, and the site serving in front of it on a thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from live_site import HOSTILE_GPU, REFERENCE_RUNS, LiveSite, _start, community_runs

from gpubench import record


@pytest.fixture(scope="package")
def live_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSite]:
    """The site in front of a collector with public reads, holding the reference runs
    and community_runs()."""
    runs = [record.from_json(p.read_text(), source=str(p)) for p in REFERENCE_RUNS]
    extra = community_runs()
    hostile = next(r for r in extra if r.config.model == "B0" and r.gpus[0].name == HOSTILE_GPU)
    flagged = next(r for r in extra if r.result.epoch2_seconds == 0.05)
    limited = next(r for r in extra if r.config.memory_limit_bytes)
    for started in _start(tmp_path_factory.mktemp("site"), runs + extra, public_read=True):
        site, address, admin, _ = started
        yield LiveSite(site.url, address, admin, hostile.run_id, flagged.run_id,
                       limited.run_id)
