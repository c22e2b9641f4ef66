"""The site answers the article's questions as the CLI does: will it fit, how long, what
it costs, 1x against 2x marked; every list downloads as CSV, JSON and Parquet with the
comparison key; lists page and sort; addresses it has no page for are 404s. Against the
live collector and site of conftest.py (a 200-character GPU name among the runs)."""

from __future__ import annotations

import html
import io
import json
import re
import urllib.request
from urllib.parse import quote

import pandas as pd
import pytest
from click.testing import CliRunner
from live_site import (
    FORMULA_LABEL,
    LIMIT_GIB,
    LIMIT_PEAK_GIB,
    LONG_GPU,
    LONG_RUNS,
    SHARED_ID_START,
)

from gpubench import frames
from gpubench.cli import cli
from gpubench.client import Client

# The comparison key and the largest batch: what a download's rows must carry.
KEY = (*frames.SHARED, "largest_batch_per_gpu")


def _text(body: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def _cli_json(live_site, *args: str) -> dict:
    done = CliRunner().invoke(cli, ["--collector", live_site.collector, *args,
                                    "--format", "json"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def _download(live_site, path: str) -> tuple[str, bytes, dict]:
    with urllib.request.urlopen(live_site.url.rstrip("/") + path, timeout=30) as answer:
        headers = {k.lower(): v for k, v in answer.headers.items()}
        return headers.get("content-type", ""), answer.read(), headers


def test_fit_answers_as_the_cli_does(live_site):
    status, body, _ = live_site.get("/fit/B7?memory=16GiB")
    assert status == 200, body[:2000]
    text = _text(body)
    assert "Will B7 fit on a card of 16 GiB?" in text
    assert "How sure:" in text and "fits, at about batch" in text
    # The JSON twin is the CLI's own answer to the same question.
    _, twin, _ = live_site.get("/fit/B7?memory=16GiB&format=json")
    assert json.loads(twin) == _cli_json(live_site, "fit", "--model", "B7", "--memory-limit",
                                         "16GiB")
    # The run searched as a 16 GiB card answers directly, with high confidence.
    answered = json.loads(twin)["measured"]
    assert any(a["basis"] == "searched" and a["batch"] == 3 and a["confidence"] == "high"
               for a in answered.values())
    # A card by its name: the memory its runs recorded.
    _, by_card, _ = live_site.get("/fit/B0?card=Tesla%20T4&format=json")
    assert json.loads(by_card) == _cli_json(live_site, "fit", "--model", "B0", "--card",
                                            "Tesla T4")
    assert json.loads(by_card)["card"] == "Tesla T4"
    status, bad, _ = live_site.get("/fit/B7?memory=8%20bananas")
    assert status == 400 and "is not a size" in _text(bad)
    # A bare number is not read as bytes, nor a size below the smallest card answered:
    # the CLI's words.
    for memory, words in (("8", "'8' has no unit: write 8GiB for 8 GiB"),
                          ("2GiB", "less memory than any card the benchmark knows")):
        status, bad, _ = live_site.get(f"/fit/B7?memory={memory}")
        assert status == 400 and words in _text(bad), _text(bad)


def test_estimate_answers_as_the_cli_does(live_site):
    status, body, _ = live_site.get("/estimate/B7?epochs=400")
    assert status == 200, body[:2000]
    text = _text(body)
    assert "How long do 400 epochs of B7 take?" in text
    assert "1x Tesla T4" in text and "Published figures" in text and "Assumes" in text
    _, twin, _ = live_site.get("/estimate/B7?epochs=400&format=json")
    assert json.loads(twin) == _cli_json(live_site, "estimate", "--model", "B7",
                                         "--epochs", "400")
    assert live_site.get("/estimate/B7?epochs=-3")[0] == 400


def test_cost_answers_as_compare_with_prices_does(live_site):
    query = "precision=float32&backend=torch&price=" + quote("NVIDIA H200=32000") + \
        "&price=" + quote("Tesla T4=2300")
    status, body, _ = live_site.get(f"/cost/B0?{query}")
    assert status == 200, body[:2000]
    text = _text(body)
    assert "img/s per 1k USD" in text and "32,000" in text
    _, twin, _ = live_site.get(f"/cost/B0?{query}&format=json")
    # The site's comparisons default to the default run's settings and batch rule.
    assert json.loads(twin) == _cli_json(live_site, "compare", "--model", "B0", "--precision",
                                         "float32", "--backend", "torch", "--settings",
                                         "kernels+cuda-graphs", "--batch-rule", "steps",
                                         "--price", "NVIDIA H200=32000",
                                         "--price", "Tesla T4=2300")
    # The form's lines of prices answer the same; a bad price names itself.
    lines = quote("NVIDIA H200=32000\nTesla T4=2300")
    _, from_form, _ = live_site.get(f"/cost/B0?precision=float32&backend=torch&prices={lines}"
                                    "&format=json")
    assert json.loads(from_form)["prices_usd"] == json.loads(twin)["prices_usd"]
    status, bad, _ = live_site.get("/cost/B0?price=" + quote("Tesla T4=2x00"))
    assert status == 400 and "is not a price in USD" in _text(bad)


def test_one_gpu_against_two_compared_anyway_marked(live_site):
    # At the default settings the two are never alike: two GPUs run without CUDA graphs.
    status, refused, _ = live_site.get("/compare/B0?settings=&batch_rule=steps&gpu=")
    assert status == 409 and "compare them anyway, marked" in _text(refused)
    path = ("/compare/B0?settings=&batch_rule=steps&backend=torch&precision=float32"
            "&pipeline=cached&allow_mixed=1&baseline=" + quote("2x NVIDIA H200"))
    status, body, _ = live_site.get(path)
    assert status == 200, body[:3000]
    text = _text(body)
    assert "Unlike runs, compared anyway" in text and "These runs differ in settings:" in text
    assert "how much faster than 2x NVIDIA H200" in text
    # Every difference in words beside the figures, each speedup marked.
    assert "settings kernels+cuda-graphs" in text and "settings kernels ✱" not in text
    rows = body.split("<tbody>")[1].split("</tbody>")[0]
    assert rows.count("✱") == rows.count("<tr")
    # The baseline select encodes the GPU count: 1x and 2x are two options.
    options = re.findall(r'<option value="([^"]*)"', body.split('name="baseline"')[1]
                         .split("</select>")[0])
    assert "1x NVIDIA H200" in options and "2x NVIDIA H200" in options
    assert '<option value="2x NVIDIA H200" selected>' in body
    # Its JSON twin says how each group ran.
    document = json.loads(live_site.get(path + "&format=json")[1])
    two = next(g for g in document["groups"] if g["gpu_count"] == 2)
    assert two["differences"] == "settings kernels" and two["is_baseline"]


def test_downloads_open_in_pandas_with_the_comparison_key(live_site):
    lists = ["/leaderboard/B0", "/compare/B3?baseline=" + quote("1x Tesla T4"), "/runs",
             "/runs?model=B0&sort=epoch2", "/gpu/Tesla%20T4"]
    for path in lists:
        joiner = "&" if "?" in path else "?"
        kind, body, headers = _download(live_site, f"{path}{joiner}format=csv")
        assert kind.startswith("text/csv") and "attachment" in headers["content-disposition"]
        csv = pd.read_csv(io.BytesIO(body))
        _, parquet_bytes, _ = _download(live_site, f"{path}{joiner}format=parquet")
        parquet = pd.read_parquet(io.BytesIO(parquet_bytes))
        _, json_bytes, _ = _download(live_site, f"{path}{joiner}format=json")
        document = json.loads(json_bytes)
        # A comparison's download holds the cards not yet catalogued after its groups.
        rows = [*document["groups"], *document["uncatalogued"]] \
            if isinstance(document, dict) else document
        for frame in (csv, parquet, pd.DataFrame(rows)):
            missing = [c for c in KEY if c not in frame.columns]
            assert not missing and len(frame), (path, missing)
        assert len(csv) == len(parquet) == len(rows), path
    # The raw record of a run.
    _, raw, _ = _download(live_site, f"/run/{live_site.hostile_run_id}?format=json")
    assert json.loads(raw)["run"]["run_id"] == live_site.hostile_run_id


def test_a_formula_cell_is_neutralised_in_csv(live_site):
    _, body, _ = _download(live_site, "/runs?format=csv")
    labels = pd.read_csv(io.BytesIO(body), keep_default_na=False)["label"].tolist()
    assert "'" + FORMULA_LABEL in labels and FORMULA_LABEL not in labels
    # Parquet and JSON keep the text as it is (not a spreadsheet's input).
    _, parquet, _ = _download(live_site, "/runs?format=parquet")
    assert FORMULA_LABEL in pd.read_parquet(io.BytesIO(parquet))["label"].tolist()


def test_lists_page_and_sort(live_site):
    status, first, _ = live_site.get("/runs")
    assert status == 200 and "next page" in first
    following = html.unescape(re.search(r'<a href="([^"]+)">next page</a>', first).group(1))
    _, second, _ = live_site.get(following)
    assert "first page" in second
    ids = lambda page: re.findall(r'<a href="/run/([0-9a-f-]{36})"', page)  # noqa: E731
    assert ids(first) and ids(second) and not set(ids(first)) & set(ids(second))
    # The long-named GPU's page pages its B0 runs.
    _, long_page, _ = live_site.get("/gpu/" + quote(LONG_GPU, safe=""))
    assert f"1-50 of {LONG_RUNS}" in _text(long_page)
    # Sorting by a figure, both ways; an unknown column names itself.
    _, fast, _ = live_site.get("/leaderboard/B0?sort=img_s&order=desc")
    text = _text(fast)
    assert text.index("1x NVIDIA H200") < text.index("1x NVIDIA GeForce GTX 1070")
    _, slow, _ = live_site.get("/leaderboard/B0?sort=img_s&order=asc")
    text = _text(slow)
    assert text.index("1x NVIDIA GeForce GTX 1070") < text.index("1x NVIDIA H200")
    status, bad, _ = live_site.get("/runs?sort=colour")
    assert status == 400 and "sort" in _text(bad)


def test_addresses_without_a_page_are_404(live_site):
    for path in ("/gpu/nope", "/leaderboard/B9", "/nothing/here", "/compare/B1",
                 "/fit/B8", "/run/ffffffff"):
        status, body, headers = live_site.get(path)
        assert status == 404, path
        assert "text/html" in headers["content-type"] and "<h1>" in body, path
    assert live_site.get("/gpu/nope?format=json")[0] == 404


def test_short_run_ids_are_unique_and_taken_by_the_site_and_getrun(live_site):
    with Client(live_site.collector) as client:
        stored = list(client.iter_runs())
    shorts = [s.short_id for s in stored]
    assert len(set(shorts)) == len(shorts) and all(len(s) >= 8 for s in shorts)
    # The published T4 runs' ids differ early: 8 characters each. Two runs of the T4 share
    # their first 12: longer prefixes tell them apart, and each is what the lists show and
    # what GetRun takes.
    assert all(len(s.short_id) == 8 for s in stored if s.run.published)
    shared = [s for s in stored if s.run.run_id.startswith(SHARED_ID_START)]
    assert len(shared) == 2 and all(len(s.short_id) > 8 for s in shared)
    _, page, _ = live_site.get("/runs?model=B3")
    for s in shared + [s for s in stored if s.run.published]:
        if s.run.config.model == "B3":
            assert f">{s.short_id}</a>" in page
            status, body, _ = live_site.get(f"/run/{s.short_id}")
            assert status == 200 and s.run.run_id in body
    status, ambiguous, _ = live_site.get(f"/run/{SHARED_ID_START[:8]}")
    assert status == 400 and "give more of it" in _text(ambiguous)


def test_peak_memory_is_a_share_of_the_memory_limit(live_site):
    status, body, _ = live_site.get(f"/run/{live_site.limited_run_id}")
    assert status == 200
    text = _text(body)
    share = round(LIMIT_PEAK_GIB / LIMIT_GIB * 100)
    assert f"{LIMIT_PEAK_GIB} GiB ({share}% of limit)" in text
    _, compared, _ = live_site.get("/compare/B7?settings=&batch_rule=&allow_mixed=1")
    assert f"{LIMIT_PEAK_GIB} / {LIMIT_GIB}.0 GiB limit ({share}%)" in _text(compared)


def test_metrics_answer_openmetrics_when_asked(live_site):
    request = urllib.request.Request(live_site.url + "metrics",
                                     headers={"Accept": "application/openmetrics-text"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        kind, body = answer.headers["content-type"], answer.read().decode()
    assert kind.startswith("application/openmetrics-text") and body.rstrip().endswith("# EOF")
    # Every refusal reason is there from the start.
    for reason in ("invalid", "token", "forbidden", "limit", "conflict", "disk-full",
                   "unavailable", "other"):
        assert f'gpubench_collector_refusals_total{{reason="{reason}"}}' in body


@pytest.mark.parametrize("path", ["/leaderboard/B0", "/compare/B0", "/runs", "/gpu/Tesla%20T4",
                                  "/fit/B7", "/estimate/B7", "/cost/B7"])
def test_every_page_links_its_downloads_and_the_answers(live_site, path):
    status, body, _ = live_site.get(path)
    assert status == 200, body[:2000]
    assert "format=json" in body
    if path.startswith(("/leaderboard", "/gpu")):
        assert "/fit/" in body and "/estimate/" in body
