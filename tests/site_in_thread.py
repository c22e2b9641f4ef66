"""The results site on a thread of the tests: `gpubench-collector web`'s own uvicorn
server and application, started beside a collector the test holds."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class RunningSite:
    """The site serving on a thread of the tests; `stop()` ends it."""

    url: str
    port: int
    _server: Any
    _thread: threading.Thread

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        self._server.should_exit = True
        self._thread.join(timeout=10)


def start_in_thread(config: Any, *, host: str = "127.0.0.1", port: int = 0) -> RunningSite:
    """`gpubench-collector web`'s uvicorn server for `config` (a SiteConfig) on a daemon
    thread; returns once it accepts connections."""
    import uvicorn

    from gpubench.collector.web.server import bind, url_of, uvicorn_config

    sock = bind(host, port)
    bound = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(config, host, bound, log_level="warning"))
    # uvicorn installs signal handlers only on the main thread: the tests' stay.
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                              name="gpubench-site", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the site did not start on {host}:{bound}")
        time.sleep(0.02)
    return RunningSite(url=url_of(host, bound), port=bound, _server=server, _thread=thread)
