"""Shared test fixtures: a real collector on port 0 over a real DuckDB file, and run records.

- `collector`: a running collector (plaintext on 127.0.0.1, no rate limit and no
  limit of failed authentications) with an admin token; see `RunningCollector` for what it offers.
- `collector_factory(**options)`: more collectors, with `create_server` options
  (public_read=True, tls=TlsFiles(...), rate_limit=5, max_message_bytes=...).
- `make_run`: `factories.make_run`, a complete and realistic run record.
- `migrated_database`: a database file with every migration applied, made once per test
  process; `collector_factory` copies it for each fresh collector instead of migrating
  a new file every time.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from factories import make_run as _make_run

# The report's end at 80 columns: --slowest N, and the skips with their reasons.
pytest_plugins = ["report_at_80"]

# Knobs of the test harness itself (which image, proxy or folder a test uses), not settings
# of gpubench: kept. Every other GPUBENCH_* variable is a setting a user may have exported
# (`make demo` suggests GPUBENCH_COLLECTOR and GPUBENCH_TOKEN): the tests never read it.
HARNESS_VARIABLES = ("GPUBENCH_TEST_", "GPUBENCH_SITE_SCREENSHOTS", "GPUBENCH_HAPROXY",
                     "GPUBENCH_CACHE")


def users_settings(environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """The GPUBENCH_* variables of `environ` that are gpubench's settings, not the harness's."""
    return sorted(name for name in environ if name.startswith("GPUBENCH_")
                  and not name.startswith(HARNESS_VARIABLES) and not name.endswith("_IMAGE"))


# Removed when the tests start (in every pytest-xdist worker too), before any fixture or
# command a test starts could read them.
for _name in users_settings(os.environ):
    del os.environ[_name]

# Every temporary file of the session in one folder of its own, removed at its end when
# every test passed (kept for a look otherwise, and said where): pytest's tmp_path
# folders, Chromium's profiles, torch's compile cache, what the commands tests start make
# with mktemp. TMPDIR reaches them all (the workers inherit it); /tmp keeps nothing.
SESSION_TMP: str | None = None
if "PYTEST_XDIST_WORKER" not in os.environ:
    SESSION_TMP = tempfile.mkdtemp(prefix="gpubench-tests-")
    os.environ["TMPDIR"] = SESSION_TMP
    tempfile.tempdir = None  # the next gettempdir() reads TMPDIR


def pytest_addoption(parser: pytest.Parser) -> None:
    """The fault campaign's options (tests/chaos): declared here, where pytest reads
    options whichever folder it is given."""
    group = parser.getgroup("chaos", "the collector's fault campaign (tests/chaos)")
    group.addoption("--chaos-size", choices=("short", "full"), default="short",
                    help="short (default; make test-e2e): fewer submissions, kills, cases "
                         "and seconds, a minute or two in all; full: make chaos")
    group.addoption("--chaos-seed", type=int, default=None, metavar="N",
                    help="seed of the random moments and cases (default: from the clock; "
                         "the report shows it, so that a run can be repeated)")


GPU_TESTS = Path(__file__).resolve().parent / "gpu"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test in tests/gpu is marked gpu: make test and make test-e2e do not collect
    that folder (its modules import torch and Keras as they load), so an unmarked test
    there would run in neither."""
    unmarked = [item.nodeid for item in items
                if GPU_TESTS in item.path.parents and item.get_closest_marker("gpu") is None]
    if unmarked:
        raise pytest.UsageError(
            f"{', '.join(unmarked)}: not marked gpu, yet in tests/gpu, which make test and "
            "make test-e2e do not collect: mark it gpu, or move it to another folder")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the session's temporary folder once every test passed."""
    if SESSION_TMP is not None and exitstatus == 0:
        shutil.rmtree(SESSION_TMP, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            exitstatus: int) -> None:
    """Where the temporary files were kept, when a test failed."""
    if SESSION_TMP is not None and exitstatus != 0 and os.path.isdir(SESSION_TMP):
        terminalreporter.write_line(f"temporary files kept in {SESSION_TMP}")


@dataclass
class RunningCollector:
    """A collector serving in this process; stopped by the fixture."""

    address: str  # "127.0.0.1:PORT"
    admin_token: str
    db_path: Path
    port: int
    store: Any  # collector.store.Store
    tokens: Any  # collector.auth.TokenBook, the one the server uses
    server: Any  # grpc.Server
    _stopped: bool = field(default=False, repr=False)
    _channels: list[Any] = field(default_factory=list, repr=False)

    def make_token(self, name: str, admin: bool = False) -> str:
        """A new token's secret (through the server's own token book)."""
        _, secret = self.tokens.create(name, admin=admin)
        return secret

    def revoke_token(self, name: str) -> None:
        """Revoke a token as the Admin service would."""
        self.tokens.revoke(name)

    def channel(self) -> Any:
        """A plaintext grpc.Channel to this collector (closed when it stops)."""
        import grpc

        channel = grpc.insecure_channel(self.address)
        self._channels.append(channel)
        return channel

    def collector_stub(self) -> Any:
        """A gpubench.v1.Collector stub on a fresh channel."""
        from gpubench.v1 import collector_pb2_grpc

        return collector_pb2_grpc.CollectorStub(self.channel())

    def admin_stub(self) -> Any:
        """A gpubench.v1.Admin stub on a fresh channel."""
        from gpubench.v1 import collector_pb2_grpc

        return collector_pb2_grpc.AdminStub(self.channel())

    def metadata(self, token: str | None = None) -> tuple[tuple[str, str], ...]:
        """Call metadata carrying `token` (the admin token by default)."""
        return (("authorization", f"Bearer {token or self.admin_token}"),)

    def stop(self) -> None:
        """Stop the server and close (checkpoint) the database."""
        if not self._stopped:
            self._stopped = True
            for channel in self._channels:
                channel.close()
            self.server.stop(None).wait()
            self.tokens.flush()
            self.store.close()


@pytest.fixture(autouse=True)
def agent_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The agent's state folder (its host key, gpubench.agent.hostid) in a temporary folder, for
    the agent in this process and the agents tests start: never the tester's own."""
    folder = tmp_path_factory.mktemp("agent-state")
    monkeypatch.setenv("GPUBENCH_STATE", str(folder))
    return folder


@pytest.fixture(scope="session")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed database with every migration applied and nothing else, made once per
    test process (each pytest-xdist worker makes its own): copy it with `fresh_database`."""
    from gpubench.collector.store import Store

    path = tmp_path_factory.mktemp("migrated") / "template.duckdb"
    Store(path).close()
    # close() checkpoints: the whole database is in the one file, with no write-ahead
    # log beside it that a copy of the file alone would lose.
    leftovers = sorted(p.name for p in path.parent.iterdir() if p.is_file() and p != path)
    assert not leftovers, f"a closed database left {leftovers} beside its file"
    return path


def fresh_database(template: Path, path: Path) -> Path:
    """`path`: a copy of the closed, migrated `template` (what opening a new file gives,
    without running the migrations again)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, path)
    return path


@pytest.fixture
def collector_factory(
    tmp_path: Path, migrated_database: Path
) -> Iterator[Callable[..., RunningCollector]]:
    """Start collectors with `create_server` options; every one is stopped afterwards."""
    from gpubench.collector.auth import TokenBook
    from gpubench.collector.server import create_server
    from gpubench.collector.store import Store

    started: list[RunningCollector] = []

    def start(*, db_path: Path | None = None, **options: Any) -> RunningCollector:
        options.setdefault("rate_limit", 0)
        options.setdefault("auth_failures_per_minute", 0)  # tests fail many on purpose
        path = db_path or fresh_database(
            migrated_database, tmp_path / f"collector-{len(started)}.duckdb")
        store = Store(path)
        tokens = TokenBook(store)
        server, port = create_server(store, host="127.0.0.1", port=0, tokens=tokens, **options)
        server.start()
        _, admin_token = tokens.create("admin", admin=True)
        running = RunningCollector(
            address=f"127.0.0.1:{port}", admin_token=admin_token, db_path=path, port=port,
            store=store, tokens=tokens, server=server,
        )
        started.append(running)
        return running

    yield start
    for running in reversed(started):
        running.stop()


@pytest.fixture
def collector(collector_factory: Callable[..., RunningCollector]) -> RunningCollector:
    """A running collector on 127.0.0.1:PORT with a fresh database and an admin token."""
    return collector_factory()


@pytest.fixture
def make_run() -> Callable[..., Any]:
    """`factories.make_run`: a complete, valid, realistic run record."""
    return _make_run
