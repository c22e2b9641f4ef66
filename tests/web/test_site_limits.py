"""The site's own limits and its answers to what it cannot serve: bad numbers answered
400, every error answer with the security headers, and visitors' wrong tokens costing
nobody else. (Idle, slow and too many connections are the proxy's: docker/compose.yaml.)"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from live_site import LiveSite, _start, community_runs

from gpubench.collector.web import views
from gpubench.collector.web.app import SECURITY_HEADERS


def has_security_headers(headers: dict[str, str]) -> bool:
    found = {k.lower(): v for k, v in headers.items()}
    return all(found.get(name.lower()) == value for name, value in SECURITY_HEADERS.items())


@pytest.mark.parametrize("count", ["-1", "4294967296", "0", "65", "two"])
def test_a_baseline_count_out_of_range_is_refused_naming_it(live_site, count: str) -> None:
    status, body, headers = live_site.get(f"/compare/B0?baseline=Tesla+T4&count={count}")
    assert status == 400, body[:300]  # it was 500 for -1 and 4294967296
    assert "count: must be a whole number of GPUs from 1 to 64" in body
    assert has_security_headers(headers)


@pytest.mark.parametrize("path", ["/no/such/page", "/run/x?method=post"])
def test_starlettes_own_answers_carry_the_security_headers(live_site, path: str) -> None:
    if "method" in path:
        request = urllib.request.Request(live_site.url + "run/x", method="POST", data=b"")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        status, headers = refused.value.code, dict(refused.value.headers)
    else:
        status, _, headers = live_site.get(path)
    assert status in (404, 405)
    assert has_security_headers(headers)


def test_a_bug_is_a_500_page_with_the_security_headers(live_site, monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(views, "overview", broken)
    status, body, headers = live_site.get("/")
    assert status == 500 and "The site failed" in body and "a bug" not in body
    assert has_security_headers(headers)


def test_visitors_wrong_tokens_never_shut_out_the_sites_reads(tmp_path) -> None:
    """With --visitor-tokens every visitor's token reaches the collector from the site's
    address: wrong ones used to shut the whole site out (a 400 for everyone)."""
    for site, _, admin, _ in _start(tmp_path, community_runs()[:3], public_read=True,
                                    visitor_tokens=True, auth_failures_per_minute=3):
        live = LiveSite(site.url, "", admin, "", "")
        with ThreadPoolExecutor(4) as pool:
            guesses = [pool.submit(live.get, "/runs", f"gpb_guess{i}") for i in range(8)]
            time.sleep(0.5)
            for _ in range(3):  # meanwhile, a visitor without a token, and a valid one
                assert live.get("/runs")[0] == 200
                assert live.get("/runs", token=admin)[0] == 200
            # Wrong tokens: 401, and 429 once the site's address has spent its budget.
            assert {g.result()[0] for g in guesses} <= {401, 429}
            assert 401 in {g.result()[0] for g in guesses}
