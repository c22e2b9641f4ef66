"""`gpubench-collector web`: a process of its own in front of a live collector, reading
with the token it is given, printing its address, stopping on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent


def start_site(collector, tmp_path: Path, columns: int) -> subprocess.Popen:
    """`gpubench-collector web` on any free port, reading `collector` with a site token."""
    token_file = tmp_path / "token"
    token_file.write_text(collector.make_token("site") + "\n")
    return subprocess.Popen(
        [str(BIN / "gpubench-collector"), "web", "--collector", collector.address,
         "--token-file", str(token_file), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": str(columns)})


def test_web_serves_a_private_collector_with_its_token(collector, make_run, tmp_path):
    from gpubench.client import Client

    with Client(collector.address, token=collector.admin_token) as client:
        client.submit_run(make_run())
    process = start_site(collector, tmp_path, 80)
    try:
        assert process.stdout is not None
        # At 80 columns the line wraps once: the site's address on the first line.
        line = process.stdout.readline() + process.stdout.readline()
        assert all(len(part) <= 80 for part in line.splitlines()), line
        found = re.search(r"results site on (http://127\.0\.0\.1:\d+/), reading the collector "
                          r"at\s+" + re.escape(collector.address) + r"\s+with a token", line)
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


def test_compose_serves_the_site_with_this_command(collector, make_run):
    """docker/compose.yaml's site service: its command, as written, serves the site."""
    import json

    from gpubench.client import Client

    with Client(collector.address, token=collector.admin_token) as client:
        client.submit_run(make_run())
    compose = (Path(__file__).resolve().parents[2] / "docker" / "compose.yaml").read_text()
    service = compose.split("\n  site:\n", 1)[1].split("\n  agent:\n", 1)[0]
    command = json.loads(re.search(r"command: (\[[^\]]*\])", service, re.DOTALL).group(1))
    assert command[:3] == ["web", "--collector", "collector:50051"]
    # The compose network's names, for this machine's: the collector, any free port.
    args = [collector.address if a == "collector:50051" else "0" if a == "8080" else a
            for a in command]
    token_file = Path(collector.db_path).with_name("site.token")
    token_file.write_text(collector.make_token("site") + "\n")
    process = subprocess.Popen([str(BIN / "gpubench-collector"), *args,
                                "--token-file", str(token_file)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        found = re.search(r"results site on http://127\.0\.0\.1:(\d+)/", line)
        assert found, line + (process.stderr.read() if process.poll() is not None else "")
        url = f"http://127.0.0.1:{found.group(1)}/"
        with urllib.request.urlopen(url + "healthz", timeout=20) as answer:
            assert answer.read().decode().startswith("ok")
        with urllib.request.urlopen(url + "fit/B0", timeout=20) as answer:
            assert answer.status == 200
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)


def test_without_the_web_extra_it_says_what_to_install():
    """`gpubench-collector web` where the web extra is not installed: one line naming
    the pip install, exit 2, no traceback."""
    code = (
        "import importlib.abc, sys\n"
        "class Missing(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('starlette', 'uvicorn'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Missing())\n"
        "from gpubench.collector.cli import main\n"
        "main(['web', '--port', '0'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    from gpubench.versions import DISTRIBUTION

    assert f"pip install '{DISTRIBUTION}[web]'" in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr


def test_uvicorn_speaks_in_the_sites_own_log_format(collector, tmp_path):
    """A malformed request makes uvicorn warn; the line comes in the format of the site's
    own lines (time, level, logger), never uvicorn's bare "WARNING:  ..."."""
    import socket

    process = start_site(collector, tmp_path, 200)
    try:
        assert process.stdout is not None
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", process.stdout.readline())
        assert found
        with socket.create_connection(("127.0.0.1", int(found.group(1))), timeout=20) as conn:
            conn.sendall(b"NOT HTTP \x00\x01\r\n\r\n")
            assert conn.recv(100).startswith(b"HTTP/1.1 400")
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=20)
    lines = err.splitlines()
    assert not [line for line in lines if re.match(r"(WARNING|INFO|ERROR):\s", line)], err
    assert any(re.match(r"\d{4}-\d\d-\d\d [\d:,]+ WARNING uvicorn\.error: Invalid HTTP request",
                        line) for line in lines), err
