"""Headless Chromium driven through its DevTools protocol (a websocket, no browser
download): load a page at a window width, collect console errors, check the layout,
take a full-page screenshot."""

from __future__ import annotations

import base64
import collections
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

LISTENING = re.compile(r"DevTools listening on (ws://\S+)")
START_TIMEOUT_S = 20.0
LOAD_TIMEOUT_S = 15.0

# Run in the page: what makes a layout unreadable. The page must not be wider than the
# window; no element outside a .scroll box may end past the window's right edge; inside
# one, no figure column (th.n, td.n) may lie beyond the box's visible part (a figure seen
# only by scrolling sideways, as a long GPU name in a wide table can push them); no two
# text blocks (neither inside the other) may overlap, in the page or in a chart.
LAYOUT_CHECK = r"""
(() => {
  const problems = [];
  const width = window.innerWidth;
  const root = document.documentElement;
  if (root.scrollWidth > width) {
    problems.push(`the page is ${root.scrollWidth}px wide in a ${width}px window`);
  }
  const describe = (el) => el.tagName.toLowerCase() +
    (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ')[0] : '') +
    ` "${(el.textContent || '').trim().slice(0, 40)}"`;
  for (const el of document.body.querySelectorAll('*')) {
    if (el.closest('.scroll') || el.closest('svg')) continue;
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > width + 1) {
      problems.push(`${describe(el)} ends at ${Math.round(r.right)}px`);
    }
  }
  for (const box of document.querySelectorAll('.scroll')) {
    const b = box.getBoundingClientRect();
    if (b.width === 0 || b.height === 0) continue;
    const left = Math.max(b.left, 0), right = Math.min(b.right, width);
    for (const cell of box.querySelectorAll('th.n, td.n')) {
      const r = cell.getBoundingClientRect();
      if (r.width === 0 || r.height === 0) continue;
      if (r.right > right + 1 || r.left < left - 1) {
        problems.push(`${describe(cell)}: a figure column out of view at ` +
                      `${Math.round(r.left)}-${Math.round(r.right)}px, its box showing ` +
                      `${Math.round(left)}-${Math.round(right)}px`);
        break;  // one cell a box says it
      }
    }
  }
  const blocks = [...document.querySelectorAll(
    'h1, h2, h3, p, th, td, dt, dd, label, button, figcaption, li, .tag, nav a, svg text')]
    .filter((el) => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; });
  // What shows of a block: inside a scrolling box, only the part within the box.
  const shown = (el) => {
    const r = el.getBoundingClientRect();
    const box = el.closest('.scroll');
    if (!box) return r;
    const b = box.getBoundingClientRect();
    return {left: Math.max(r.left, b.left), right: Math.min(r.right, b.right),
            top: Math.max(r.top, b.top), bottom: Math.min(r.bottom, b.bottom)};
  };
  const boxes = blocks.map(shown);
  for (let i = 0; i < blocks.length; i++) {
    for (let j = i + 1; j < blocks.length; j++) {
      const a = blocks[i], b = blocks[j];
      if (a.contains(b) || b.contains(a)) continue;
      const p = boxes[i], q = boxes[j];
      const x = Math.min(p.right, q.right) - Math.max(p.left, q.left);
      const y = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
      if (x > 2 && y > 2) problems.push(`${describe(a)} overlaps ${describe(b)}`);
      if (problems.length > 20) return problems;
    }
  }
  return problems;
})()
"""


# Where `make test` unpacks Debian's chromium and the libraries it needs when none is on
# PATH (tests/fetch_debian.sh): nothing of it is installed on the system.
FETCHED = Path(__file__).resolve().parents[2] / ".tools" / "chromium"
FETCHED_BINARY = FETCHED / "usr" / "lib" / "chromium" / "chromium"


def find_chromium() -> str | None:
    """The Chromium to drive: $CHROMIUM, else chromium or chromium-browser on PATH, else
    the one `make test` fetched into .tools/chromium."""
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or \
        shutil.which("chromium-browser") or \
        (str(FETCHED_BINARY) if os.access(FETCHED_BINARY, os.X_OK) else None)


def _environment(executable: str, profile: Path) -> dict[str, str] | None:
    """What the fetched chromium needs to find in place of a system install: its
    libraries (every folder of .tools/chromium that holds one) and a fontconfig file
    naming its fonts. None (this process's environment) for any other Chromium."""
    if Path(executable) != FETCHED_BINARY:
        return None
    libraries = sorted({str(path.parent) for path in FETCHED.rglob("*.so*")})
    environment = {**os.environ, "LD_LIBRARY_PATH": ":".join(libraries)}
    if (FETCHED / "etc" / "fonts").is_dir():  # the system has no fontconfig: fetched too
        fonts = profile / "fonts.conf"
        fonts.write_text(
            '<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">\n'
            f"<fontconfig>\n  <dir>{FETCHED / 'usr' / 'share' / 'fonts'}</dir>\n"
            f"  <cachedir>{profile / 'fontconfig'}</cachedir>\n"
            f'  <include ignore_missing="yes">{FETCHED / "etc" / "fonts" / "conf.d"}</include>'
            "\n</fontconfig>\n")
        environment["FONTCONFIG_FILE"] = str(fonts)
    return environment


@dataclass
class PageReport:
    """What loading one page found."""

    url: str
    width: int
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, failed loads
    layout: list[str] = field(default_factory=list)  # layout problems (LAYOUT_CHECK)
    screenshot: bytes = b""
    text: str = ""  # what a reader sees (innerText)
    downloads: list[str] = field(default_factory=list)  # the page's download links (URLs)


class Chromium:
    """One headless Chromium process and one tab, driven over the DevTools protocol."""

    def __init__(self, executable: str) -> None:
        self._profile = tempfile.mkdtemp(prefix="gpubench-chromium-")
        args = [executable, "--headless=new", "--remote-debugging-port=0",
                f"--user-data-dir={self._profile}", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-gpu",
                "--disable-background-networking", "--disable-sync", "--hide-scrollbars",
                "--mute-audio", "--disable-dev-shm-usage", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to sandbox as root
        self._process = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True,
                                         env=_environment(executable, Path(self._profile)))
        self._ids = itertools.count(1)
        self._stack = contextlib.ExitStack()
        self._events: list[dict[str, Any]] = []
        address = self._await_address()
        self._socket = self._stack.enter_context(
            connect(address, max_size=64 * 1024 * 1024, open_timeout=10))
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.send("Target.attachToTarget",
                                  {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=True)

    def _await_address(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        assert self._process.stderr is not None
        seen = []
        while time.monotonic() < deadline:
            line = self._process.stderr.readline()
            if not line:
                break
            seen.append(line)
            found = LISTENING.search(line)
            if found:
                # What it says from now on is read and dropped: unread, a chatty Chromium
                # (a font missing, say) would fill the pipe and stop.
                threading.Thread(target=collections.deque, args=(self._process.stderr, 0),
                                 name="chromium-stderr", daemon=True).start()
                return found.group(1)
        self.close()
        raise RuntimeError("chromium did not start its DevTools listener:\n" + "".join(seen))

    def send(self, method: str, params: dict[str, Any] | None = None, *,
             session: bool = False, timeout: float = LOAD_TIMEOUT_S) -> dict[str, Any]:
        """Call a DevTools method; events that arrive meanwhile are kept."""
        number = next(self._ids)
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        self._socket.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            answer = json.loads(self._socket.recv(timeout=max(deadline - time.monotonic(), 0.01)))
            if answer.get("id") == number:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self._events.append(answer)

    def _wait_for(self, method: str, timeout: float = LOAD_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self._events):
            self._events.append(json.loads(self._socket.recv(
                timeout=max(deadline - time.monotonic(), 0.01))))

    def load(self, url: str, width: int, height: int = 900) -> PageReport:
        """Load `url` in a window `width` px wide; report errors, layout, a screenshot."""
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1,
                   "mobile": width < 600}, session=True)
        self._events.clear()
        self.send("Page.navigate", {"url": url}, session=True)
        self._wait_for("Page.loadEventFired")
        report = PageReport(url=url, width=width)
        layout = self.send("Runtime.evaluate", {"expression": LAYOUT_CHECK,
                                                "returnByValue": True}, session=True)
        report.layout = layout.get("result", {}).get("value") or []
        report.text = self.evaluate("document.body.innerText") or ""
        report.downloads = self.evaluate(
            "[...document.querySelectorAll('a[download]')].map(a => a.href)") or []
        for event in self._events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                report.errors.append("console: " + " ".join(
                    str(a.get("value", a.get("description", ""))) for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                report.errors.append("exception: " + params["exceptionDetails"].get("text", ""))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                entry = params["entry"]
                report.errors.append(f"{entry.get('source')}: {entry.get('text')} "
                                     f"{entry.get('url', '')}".strip())
        metrics = self.send("Page.getLayoutMetrics", session=True)
        content = metrics["cssContentSize"]
        shot = self.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width,
                     "height": min(max(content["height"], height), 8000), "scale": 1}},
            session=True)
        report.screenshot = base64.b64decode(shot["data"])
        return report

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        answer = self.send("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True}, session=True)
        return answer.get("result", {}).get("value")

    def close(self) -> None:
        """End the browser and remove its profile."""
        self._stack.close()
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def save(report: PageReport, folder: Path, name: str) -> Path:
    """Write the report's screenshot as folder/name-WIDTH.png."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{report.width}.png"
    path.write_bytes(report.screenshot)
    return path
