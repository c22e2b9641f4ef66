"""The results site against a live collector: every page answers, filters work,
submitted text is shown escaped, refusals are said in words, reads follow the
collector's rules, /metrics and /healthz answer."""

from __future__ import annotations

import html
import re
from urllib.parse import quote

import pytest
from live_site import HOSTILE_GPU, HOSTILE_LABEL, _start, community_runs

from gpubench.client import Client


def _text(body: str) -> str:
    """The page's text without tags, entities decoded (what a reader sees)."""
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


@pytest.mark.parametrize("path", [
    "/", "/leaderboard/B0", "/leaderboard/B3", "/leaderboard/B7", "/compare/B0",
    "/compare/B3", "/compare/B7", "/runs", "/runs?model=B3&gpu=T4",
    "/gpu/NVIDIA%20H200", "/gpu/Tesla%20T4", "/site.css", "/healthz", "/metrics",
])
def test_every_page_answers(live_site, path):
    status, body, headers = live_site.get(path)
    assert status == 200, body[:2000]
    if "html" in headers.get("content-type", ""):
        assert "default-src 'none'" in headers["content-security-policy"]
        assert "<script" not in body.lower()  # the site itself has no script at all


def test_leaderboard_ranks_the_default_runs_with_their_figures(live_site):
    _, body, _ = live_site.get("/leaderboard/B0")
    text = _text(body)
    order = [m.start() for m in (re.search(re.escape(name), text) for name in (
        "1x NVIDIA H200", "1x NVIDIA RTX 6000 Ada Generation", "1x Tesla T4",
        "1x NVIDIA GeForce GTX 1070")) if m]
    assert len(order) == 4 and order == sorted(order)
    # The T4's three runs: median 9.30 s, spread 9.10-9.60 s, energy, memory of the card,
    # in the terminal's voice (gpubench.figures).
    row = text[text.index("1x Tesla T4"):text.index("1x NVIDIA GeForce GTX 1070")]
    assert "9.30 s" in row and "9.10–9.60\u00a0s" in row and " 3 " in row
    assert "/ 15.0 GiB (8" in row and " J " in row
    # Published runs never rank; flagged runs are hidden unless asked for.
    assert "flagged" not in _text(body.split("<tbody>")[1].split("</tbody>")[0])


def test_leaderboard_filters(live_site):
    _, keras, _ = live_site.get("/leaderboard/B0?settings=keras&batch_rule=steps")
    assert "1x Tesla T4" in keras and "NVIDIA H200" not in _text(keras.split("<tbody>")[1])
    _, tf_only, _ = live_site.get("/leaderboard/B0?backend=tensorflow")
    assert "No B0 runs" in tf_only
    _, flagged, _ = live_site.get("/leaderboard/B0?flagged=1")
    assert "1 flagged" in _text(flagged)
    _, bf16, _ = live_site.get("/leaderboard/B0?settings=kernels%2Bdata-on-device%2Bcuda-graphs"
                               "&precision=mixed_bfloat16")
    assert "1x NVIDIA H200" in _text(bf16)  # the reference fast run
    status, bad, _ = live_site.get("/leaderboard/B0?precision=float64")
    assert status == 400 and "precision" in bad and "float64" in bad
    assert live_site.get("/leaderboard/B9")[0] == 404  # no such page


def test_comparison_chart_table_and_published_section(live_site):
    status, body, _ = live_site.get("/compare/B0?baseline=Tesla+T4")
    assert status == 200, body[:3000]
    text = _text(body)
    assert "how much faster than 1x Tesla T4" in text
    assert "<svg" in body and "<rect" in body and "whisker" in body
    assert "1.00x" in text  # the baseline's own row
    # The article's figures are in a section of their own, with their source.
    published = text[text.index("Published figures"):]
    assert "1x Tesla T4" in published and "backend" in published
    assert "epoch 2 (median)" in published


def test_comparison_refuses_unlike_runs_in_words(live_site):
    status, body, _ = live_site.get("/compare/B0?settings=&batch_rule=")
    assert status == 409
    text = _text(body)
    assert "The collector refuses to compare these runs" in text
    # It names each difference, as the CLI does.
    assert "They differ in:" in text
    words = " ".join(text.split())
    assert "settings : keras, kernels, kernels+cuda-graphs, kernels+data-on-device+cuda-graphs " \
           "(choose one in Settings above)" in words
    assert "precision : float32, mixed_bfloat16 (choose one in Precision above)" in words
    assert "batch rule :" in words and "choose one in Batch rule above" in words
    assert "<form" in body  # the form stays, to pin what differs


def test_run_page_shows_the_whole_record(live_site):
    with Client(live_site.collector) as client:
        stored = next(s for s in client.iter_runs(gpu="H200", model="B7")
                      if s.run.result.batch_trials)
    status, body, _ = live_site.get(f"/run/{stored.run.run_id}")
    assert status == 200
    text = _text(body)
    for heading in ("Result", "Warnings", "Epochs", "GPU memory", "Batch search", "Settings",
                    "Inventory", "Host", "Software"):
        assert heading in text
    assert stored.run.run_id in text and "NVIDIA H200" in text
    # Words, not the record's field and enum names.
    words = " ".join(text.split())
    assert "CUDA graphs: on" in words and "largest batch" in words and "timed batch" in words
    for raw in ("BATCH_CHOICE", "RUN_STATUS", "ram_bytes", "cuda_graphs", "memory_total_bytes"):
        assert raw not in body, raw
    assert live_site.get("/run/00000000-0000-0000-0000-000000000000")[0] == 404


def test_submitted_text_is_shown_escaped(live_site):
    _, body, _ = live_site.get(f"/run/{live_site.hostile_run_id}")
    assert "<script>alert(1)</script>" not in body and HOSTILE_LABEL not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert html.escape(HOSTILE_LABEL, quote=True) in body or \
        "&lt;img src=x onerror=&#34;alert(2)&#34;&gt;" in body
    # Bidirectional and zero-width characters never reach the page raw: visible escapes.
    assert "\u202e" not in body and "\u200b" not in body and "\u202c" not in body
    assert '<span class="esc" title="hidden character">\\u202e</span>' in body
    assert "\\u200b" in body
    # The hostile name is no catalogued card's: its run is flagged, shown when asked for.
    for path in ("/leaderboard/B0?flagged=1", "/compare/B0?flagged=1",
                 "/runs?gpu=" + quote(HOSTILE_GPU),
                 "/gpu/" + quote(HOSTILE_GPU, safe="")):
        status, page, _ = live_site.get(path)
        assert status == 200, path
        assert "<script>" not in page and "&lt;script&gt;alert(1)" in page, path


def test_gpu_page_lists_its_runs_by_model(live_site):
    _, body, _ = live_site.get("/gpu/Tesla%20T4")
    text = _text(body)
    assert "Tesla T4" in text and "15.0 GiB" in text
    assert "B0" in text and "B3" in text and "B7" in text
    assert "published" in text and "flagged" in text
    status, none, _ = live_site.get("/gpu/Quantum%20GPU%209000")
    assert status == 404 and "No runs on a GPU named Quantum GPU 9000" in _text(none)


def test_flagged_run_says_why(live_site):
    _, body, _ = live_site.get(f"/run/{live_site.flagged_run_id}")
    assert "Flagged as implausible" in body and "faster" in _text(body).lower() or \
        "Flagged as implausible" in body


def test_metrics_and_health(live_site):
    live_site.get("/compare/B0?settings=&batch_rule=")  # a refusal to count
    status, metrics, headers = live_site.get("/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert 'gpubench_site_requests_total{page="compare",status="409"}' in metrics
    assert 'gpubench_site_collector_refusals_total{code="FAILED_PRECONDITION"}' in metrics
    assert "gpubench_collector_up 1.0" in metrics
    status, health, _ = live_site.get("/healthz")
    assert status == 200 and health.startswith("ok")


def test_private_collector_refuses_the_site_without_a_token(tmp_path):
    from live_site import LiveSite

    runs = community_runs()[:3]
    for site, _, admin, tokens in _start(tmp_path, runs, public_read=False):
        live = LiveSite(site.url, "", admin, "", "")
        status, body, headers = live.get("/leaderboard/B0")
        assert status == 401 and "needs a token to read" in body
        assert headers["www-authenticate"].startswith("Bearer")
        assert "1x Tesla T4" not in body
        _, reader = tokens.create("reader", admin=False)
        # A visitor's token is not used unless the site is told to (--visitor-tokens).
        assert live.get("/leaderboard/B0", token=reader)[0] == 401
        assert live.get("/healthz")[0] == 200  # health needs no token


@pytest.mark.parametrize("how", ["site token", "visitor tokens"])
def test_private_collector_with_a_token(tmp_path, how):
    from live_site import LiveSite

    runs = community_runs()[:3]
    for site, _, admin, tokens in _start(tmp_path, runs, public_read=False,
                                         site_token=how == "site token",
                                         visitor_tokens=how == "visitor tokens"):
        live = LiveSite(site.url, "", admin, "", "")
        if how == "site token":
            status, body, _ = live.get("/runs")
            assert status == 200 and "1x Tesla T4" in body
        else:
            _, reader = tokens.create("reader", admin=False)
            status, body, _ = live.get("/runs", token=reader)
            assert status == 200 and "1x Tesla T4" in body
            assert live.get("/runs", token="gpb_wrong")[0] == 401
            assert live.get("/runs")[0] == 401


def test_the_site_only_reads(live_site):
    import urllib.request

    for method in ("POST", "PUT", "DELETE"):
        request = urllib.request.Request(live_site.url + "run/x", method=method, data=b"")
        try:
            urllib.request.urlopen(request, timeout=10)
            raise AssertionError(f"{method} answered")
        except urllib.error.HTTPError as exc:
            assert exc.code == 405


def test_metrics_show_the_collectors_counts(live_site):
    from gpubench.v1 import run_pb2

    with Client(live_site.collector, token=live_site.admin_token) as client:
        before = client.stats()
        bad = run_pb2.Run(run_id="not-a-uuid")
        with pytest.raises(Exception, match="INVALID_ARGUMENT|refused"):
            client.submit_run(bad)
    with Client(live_site.collector, token="gpb_wrong") as client:
        with pytest.raises(Exception, match="token"):
            client.submit_run(bad)
    with Client(live_site.collector) as client:
        after = client.stats()
    assert after.refusals["invalid"] == before.refusals.get("invalid", 0) + 1
    assert after.refusals["token"] == before.refusals.get("token", 0) + 1
    assert after.submissions_accepted >= 16 and after.runs_stored >= 16
    assert after.runs_flagged >= 1 and after.runs_published == 3
    _, metrics, _ = live_site.get("/metrics")
    assert f"gpubench_collector_submissions_total {float(after.submissions_accepted)}" in metrics
    assert 'gpubench_collector_refusals_total{reason="invalid"}' in metrics
    assert 'gpubench_collector_runs{kind="flagged"}' in metrics
    assert 'gpubench_collector_runs{kind="published"} 3.0' in metrics
