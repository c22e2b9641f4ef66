"""Serving the site with uvicorn (`gpubench-collector web`)."""

from __future__ import annotations

import socket

import uvicorn

from gpubench.collector.web import reads
from gpubench.collector.web.app import create_app
from gpubench.errors import ExitCode, GpubenchError

# uvicorn's wait for the next request after a response (s).
KEEP_ALIVE_S = 5
# The listening socket's backlog of connections not yet accepted.
BACKLOG = 2048


def uvicorn_config(config: reads.SiteConfig, host: str, port: int, *,
                   log_level: str) -> uvicorn.Config:
    """The site's application as uvicorn serves it on host:port."""
    return uvicorn.Config(
        create_app(config), host=host, port=port, log_level=log_level,
        # The site is behind nothing we know of: no proxy headers trusted, no server
        # banner, and the access log only when asked for (log_level info).
        proxy_headers=False, server_header=False, access_log=log_level in ("info", "debug"),
        lifespan="on", timeout_keep_alive=KEEP_ALIVE_S, backlog=BACKLOG,
        # uvicorn's own lines ("Invalid HTTP request received") go through the logging
        # the command set up, in the site's one format, not uvicorn's "WARNING:  ...".
        log_config=None,
    )


def bind(host: str, port: int) -> socket.socket:
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
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(config, host, bound, log_level=log_level))
    if callable(on_ready):
        on_ready(url_of(host, bound))
    server.run(sockets=[sock])
