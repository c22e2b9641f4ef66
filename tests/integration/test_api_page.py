"""docs/api.md, the Python API's page: its examples run against a real collector (gRPC on
port 0, a DuckDB file) and print the answers of the runs stored there; the page is what
scripts/api_reference.py makes of the docstrings; `Client.compare` names every pin of
the comparison key as a keyword argument."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpubench import comparison_key
from gpubench.client import Client

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "api.md"
# The default run's way of computing B0 on torch (record.DEFAULT_SETTINGS, batch rule
# "steps"), which the leaderboard ranks unless asked otherwise.
DEFAULT_RUN = {"backend": "torch", "config__batched_augmentation": True,
               "config__fused_batchnorm": True, "config__channels_first": True,
               "config__cuda_graphs": True, "config__batch_rule": "steps"}


def _examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_page_is_what_the_docstrings_say() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import api_reference
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert PAGE.read_text() == api_reference.page(), \
        "docs/api.md is out of date: python scripts/api_reference.py rewrites it"


def test_the_pages_examples_answer_from_a_real_collector(collector: Any, make_run: Any,
                                                          tmp_path: Path) -> None:
    token = collector.make_token("lab")
    with Client(collector.address, token) as client:
        for gpu, seconds in (("Tesla T4", (17.0, 17.4)), ("NVIDIA H200", (1.9, 2.0))):
            for epoch2 in seconds:
                client.submit_run(make_run(gpu_name=gpu, epoch2_seconds=epoch2, **DEFAULT_RUN))
    # The page's setting: the collector and token from the environment, nothing else
    # of the user's GPUBENCH_* variables.
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("GPUBENCH_")}
    env.update(GPUBENCH_COLLECTOR=collector.address, GPUBENCH_TOKEN=token,
               PYTHONPATH=os.pathsep.join(str(ROOT / part) for part in
                                          ("", "agent", "collector")))
    examples = [code for code in _examples() if "from gpubench import" in code]
    assert examples, "docs/api.md shows no example of the Client"
    for code in examples:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=300)
        assert done.returncode == 0, code + "\n" + done.stderr[-3000:]
        out = done.stdout
        # Each answer names both cards: the comparison, the leaderboard, the estimate.
        assert out.count("NVIDIA H200") >= 3 and out.count("Tesla T4") >= 3, out
        assert "fits" in out, out


def test_compare_takes_every_pin_of_the_comparison_key_by_name() -> None:
    parameters = inspect.signature(Client.compare).parameters
    keyword = {name for name, p in parameters.items() if p.kind == p.KEYWORD_ONLY}
    options = {"baseline", "baseline_count", "gpus", "allow_mixed", "include_outliers",
               "include_flagged"}
    assert keyword - options == set(comparison_key.NAMES)
    assert not any(p.kind == p.VAR_KEYWORD for p in parameters.values())


def test_the_package_names_its_api(tmp_path: Path) -> None:
    """`from gpubench import Client` from a checkout on PYTHONPATH (as the GPU machine's
    scripts run it), with the agent's and the collector's folders joining the package."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("GPUBENCH_")}
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / part) for part in ("", "agent", "collector"))
    code = ("import gpubench; from gpubench import Client, GpubenchError, __version__; "
            "import gpubench.agent.cli, gpubench.collector.cli; "
            "print(sorted(gpubench.__all__)); print(gpubench.agent.__file__)")
    done = subprocess.run([sys.executable, "-S", "-c",
                           f"import sys; sys.path += {sys.path!r}; {code}"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'Client'" in done.stdout
    assert done.stdout.strip().endswith(str(ROOT / "agent" / "gpubench" / "agent" /
                                            "__init__.py"))


@pytest.mark.parametrize("asked", [{}, {"memory": "16GiB", "card": "Tesla T4"}])
def test_fit_wants_the_memory_or_the_card(asked: dict[str, str]) -> None:
    from gpubench import GpubenchError

    with Client("127.0.0.1:1") as client, \
            pytest.raises(GpubenchError, match="the card's memory .* or its name"):
        client.fit("B0", **asked)
