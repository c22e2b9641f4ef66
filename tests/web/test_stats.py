"""The collector's Stats call, which the site's /metrics shows: counted in the process
holding the database."""

from __future__ import annotations

import pytest

from gpubench.client import Client
from gpubench.errors import GpubenchError
from gpubench.v1 import run_pb2


def test_stats_count_submissions_and_refusals(collector, make_run):
    with Client(collector.address, token=collector.admin_token) as client:
        assert client.stats().submissions_accepted == 0
        run = make_run()
        client.submit_run(run)
        client.submit_run(run)  # a resubmission is acknowledged again
        conflicting = make_run(run_id=run.run_id, label="other")
        with pytest.raises(GpubenchError):
            client.submit_run(conflicting)
        with pytest.raises(GpubenchError):
            client.submit_run(run_pb2.Run(run_id="x"))
    with Client(collector.address, token="gpb_unknown") as client, \
            pytest.raises(GpubenchError):
        client.submit_run(make_run())
    with Client(collector.address, token=collector.admin_token) as client:
        stats = client.stats()  # the acknowledged run is stored: its commit returned
    assert stats.submissions_accepted == 2
    assert dict(stats.refusals) == {"conflict": 1, "invalid": 1, "token": 1}
    assert stats.runs_stored == 1
    assert stats.runs_published == 0


def test_stats_are_a_read(collector):
    with Client(collector.address) as client, pytest.raises(GpubenchError, match="token"):
        client.stats()
