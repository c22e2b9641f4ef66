"""The site's own limits and its answers to what it cannot serve: bad numbers answered
400, every error answer with the security headers, idle and slow connections closed, an
address's share of connections, and visitors' wrong tokens costing nobody else."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from live_site import LiveSite, _start, community_runs

from gpubench.collector.web import views
from gpubench.collector.web.app import SECURITY_HEADERS
from gpubench.collector.web.connections import SiteLimits
from gpubench.collector.web.reads import SiteConfig
from gpubench.collector.web.server import start_in_thread


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


@pytest.fixture
def strict_site(live_site):
    """A site with short limits in front of the live collector."""
    site = start_in_thread(SiteConfig(live_site.collector),
                           limits=SiteLimits(max_connections=8, peer_connections=3,
                                             request_timeout_s=1.0))
    yield site
    site.stop()


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_connection_that_sends_nothing_or_a_byte_at_a_time_is_closed(strict_site) -> None:
    silent = socket.create_connection(("127.0.0.1", strict_site.port), timeout=10)
    slow = socket.create_connection(("127.0.0.1", strict_site.port), timeout=10)
    try:
        closed = False
        for byte in b"GET / HTTP/1.1\r\nHost: x\r\n":  # never the blank line that ends it
            try:
                slow.sendall(bytes([byte]))
            except OSError:  # closed meanwhile
                closed = True
                break
            time.sleep(0.1)
        assert closed or closed_within(slow, 30)
        assert closed_within(silent, 30)
    finally:
        silent.close()
        slow.close()


def test_an_address_holds_at_most_its_share(strict_site) -> None:
    held = [socket.create_connection(("127.0.0.1", strict_site.port), timeout=10)
            for _ in range(3)]
    try:
        refused = socket.create_connection(("127.0.0.1", strict_site.port), timeout=10)
        held.append(refused)
        assert closed_within(refused, 0.9)  # at once, before any deadline
        other = socket.create_connection(("127.0.0.1", strict_site.port), timeout=10,
                                         source_address=("127.0.0.2", 0))
        held.append(other)
        other.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        other.settimeout(30)
        assert other.recv(64).startswith(b"HTTP/1.1 ")
    finally:
        for sock in held:
            sock.close()


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
