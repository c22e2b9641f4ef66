"""`gpubench-collector web`: a process of its own in front of a live collector, reading
with the token it is given, printing its address, stopping on SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent


def test_web_serves_a_private_collector_with_its_token(collector, make_run, tmp_path):
    from gpubench.client import Client

    with Client(collector.address, token=collector.admin_token) as client:
        client.submit_run(make_run())
    token_file = tmp_path / "token"
    token_file.write_text(collector.make_token("site") + "\n")
    process = subprocess.Popen(
        [str(BIN / "gpubench-collector"), "web", "--collector", collector.address,
         "--token-file", str(token_file), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"results site on (http://127\.0\.0\.1:\d+/) \(collector "
                          + re.escape(collector.address) + r", reading with a token\)", line)
        assert found, line + process.stderr.read() if process.poll() is not None else line
        with urllib.request.urlopen(found.group(1) + "runs", timeout=20) as answer:
            assert answer.status == 200 and "Tesla T4" in answer.read().decode()
        with urllib.request.urlopen(found.group(1) + "healthz", timeout=20) as answer:
            assert answer.read().decode().startswith("ok")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)


def test_web_help_explains_every_flag():
    shown = subprocess.run([str(BIN / "gpubench-collector"), "web", "--help"],
                           capture_output=True, text=True, check=True).stdout
    for flag in ("--collector", "--token-file", "--visitor-tokens", "--ca", "--tls", "--host",
                 "--port", "--timeout", "--log-level"):
        assert flag in shown
