"""Serving the site with uvicorn: in the foreground (`gpubench-collector web`) or on a
thread of another program (the demo, the tests) through `start_in_thread`."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

import uvicorn

from gpubench.collector.web import reads
from gpubench.collector.web.app import create_app
from gpubench.errors import ExitCode, GpubenchError

START_TIMEOUT_S = 10.0
# uvicorn's wait for the next request after a response (s).
KEEP_ALIVE_S = 5
# The listening socket's backlog of connections not yet accepted.
BACKLOG = 2048


def _config(config: reads.SiteConfig, host: str, port: int, *,
            log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        create_app(config), host=host, port=port, log_level=log_level,
        # The site is behind nothing we know of: no proxy headers trusted, no server
        # banner, and the access log only when asked for (log_level info).
        proxy_headers=False, server_header=False, access_log=log_level in ("info", "debug"),
        lifespan="on", timeout_keep_alive=KEEP_ALIVE_S, backlog=BACKLOG,
    )


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (0: any free port), or a clear error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise GpubenchError(f"the site cannot listen on {host}:{port} ({exc.strerror})",
                            exit_code=ExitCode.USAGE) from None
    sock.listen(BACKLOG)
    return sock


def url_of(host: str, port: int) -> str:
    """The site's address as a browser takes it."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def serve(config: reads.SiteConfig, *, host: str = "127.0.0.1", port: int = 8080,
          log_level: str = "warning", on_ready: object = None) -> None:
    """Serve the site until SIGTERM or Ctrl-C (uvicorn's own handling). A public site
    sits behind a real proxy (docker/compose.yaml), which bounds its connections."""
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    server = uvicorn.Server(_config(config, host, bound, log_level=log_level))
    if callable(on_ready):
        on_ready(url_of(host, bound))
    server.run(sockets=[sock])


@dataclass
class RunningSite:
    """A site serving on a thread; `stop()` ends it."""

    url: str
    port: int
    _server: uvicorn.Server
    _thread: threading.Thread

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        self._server.should_exit = True
        self._thread.join(timeout=10)


def start_in_thread(config: reads.SiteConfig, *, host: str = "127.0.0.1", port: int = 0,
                    log_level: str = "warning") -> RunningSite:
    """Start the site on a daemon thread; returns once it accepts connections."""
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    server = uvicorn.Server(_config(config, host, bound, log_level=log_level))
    # uvicorn installs signal handlers only on the main thread: the host program's stay.
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                              name="gpubench-site", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise GpubenchError(f"the site did not start on {host}:{bound}")
        time.sleep(0.02)
    return RunningSite(url=url_of(host, bound), port=bound, _server=server, _thread=thread)
