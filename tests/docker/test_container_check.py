"""docker/container_check.py, the entry point's notes, without docker (part of `make test`).

test_containers.py sees the loopback note from a real container; these cover the cases
that one run cannot: a volume that is there, a collector that answers, push, --offline.
"""

from __future__ import annotations

import importlib.util
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "docker" / "container_check.py"
_spec = importlib.util.spec_from_file_location("container_check", SCRIPT)
assert _spec is not None and _spec.loader is not None
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

SPOOL = "/var/lib/gpubench/spool"
ENV = {"GPUBENCH_SPOOL": SPOOL}
NO_VOLUME = ["/", "/proc", "/etc/hosts"]
VOLUME = [*NO_VOLUME, SPOOL]


@pytest.fixture
def listening() -> Iterator[str]:
    """An address on 127.0.0.1 where something accepts connections."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield f"127.0.0.1:{server.getsockname()[1]}"


@pytest.fixture
def closed() -> str:
    """An address on 127.0.0.1 where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def test_later_flags_win_and_both_spellings_count() -> None:
    args = ["--collector", "a:1", "--quick", "--collector=b:2"]
    assert check.option(args, "--collector") == "b:2"
    assert check.option(["--collector"], "--collector") is None


def test_a_spool_on_or_under_a_volume_is_on_a_mount() -> None:
    assert check.on_a_mount(SPOOL, VOLUME)
    assert check.on_a_mount(SPOOL, [*NO_VOLUME, "/var/lib/gpubench"])
    assert not check.on_a_mount(SPOOL, NO_VOLUME)
    assert not check.on_a_mount("/var/lib/gpubench/spool2", VOLUME[:-1] + ["/var/lib/gp"])


def test_loopback_names() -> None:
    for address in ("127.0.0.1:50051", "localhost:50051", "[::1]:50051", "127.1.2.3:1"):
        assert check.loopback_host(address), address
    for address in ("collector:50051", "10.0.0.1:50051", "example.org:50051"):
        assert check.loopback_host(address) is None, address


def test_a_spool_off_a_volume_is_said_for_run_and_push(listening: str) -> None:
    run = check.notes(["gpubench-agent", "run", "--collector", listening], ENV, NO_VOLUME)
    assert len(run) == 1 and "lost when the container is removed" in run[0]
    push = check.notes(["gpubench-agent", "push", "--collector", listening], ENV, NO_VOLUME)
    assert len(push) == 1 and "holds no run of an earlier container" in push[0]
    assert check.notes(["gpubench-agent", "run", "--collector", listening], ENV, VOLUME) == []


def test_a_loopback_collector_is_said_only_when_nothing_answers(
    listening: str, closed: str
) -> None:
    said = check.notes(["gpubench-agent", "run", "--collector", closed], ENV, VOLUME)
    assert len(said) == 1 and "--network\u00a0host" in said[0], said  # kept whole when wrapped
    env = {**ENV, "GPUBENCH_COLLECTOR": closed}
    assert len(check.notes(["gpubench-agent", "run"], env, VOLUME)) == 1
    assert check.notes(["gpubench-agent", "run", "--collector", listening], ENV, VOLUME) == []
    offline = ["gpubench-agent", "run", "--offline", "--collector", closed]
    assert check.notes(offline, ENV, VOLUME) == []


def test_other_commands_and_help_get_no_notes(
    closed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in (["gpubench-agent", "status"], ["gpubench-agent", "run", "--help"],
                    ["python", "-m", "gpubench.agent.workload"]):
        assert check.main(command) == 0
    assert capsys.readouterr().err == ""


def test_notes_fit_80_columns_and_keep_flags_whole(
    closed: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(check, "mount_points", lambda: NO_VOLUME)
    monkeypatch.setenv("GPUBENCH_SPOOL", SPOOL)
    assert check.main(["gpubench-agent", "run", "--collector", closed]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(len(line) <= 80 for line in lines), lines
    text = "\n".join(lines)
    for whole in ("-v gpubench-spool:/var/lib/gpubench/spool", "--network gpubench",
                  "--collector collector:50051", "--network host"):
        assert whole in text, text
