"""docker/README.md's commands, read without docker (part of `make test`).

test_containers.py runs the blocks for real (`make test-docker`); these check that
every block is tagged and accounted for, and what every documented agent container
needs: its spool on a volume, and a network from which its collector address answers.
"""

from __future__ import annotations

import pytest
from readme_blocks import (
    NOT_RUN,
    RUN_BY_TESTS,
    SPOOL_MOUNT,
    Names,
    blocks,
    commands,
    image_runs,
    localise,
)

ALL = blocks()


def test_every_block_is_run_or_says_why_not() -> None:
    documented = set(ALL)
    accounted = set(RUN_BY_TESTS) | set(NOT_RUN)
    assert documented - accounted == set(), "blocks no test runs: add them to RUN_BY_TESTS"
    assert accounted - documented == set(), "blocks the tests name that the README lacks"


def test_the_fixtures_build_as_the_readme_says() -> None:
    assert "make -C docker LOCAL_BASE=1" in commands(ALL["build"])


@pytest.mark.parametrize("name", list(ALL))
def test_every_agent_container_keeps_its_spool_on_a_volume(name: str) -> None:
    for image, command in image_runs(ALL[name]):
        assert f"-v {SPOOL_MOUNT}" in command, f"{name}: {image} without the spool volume"


@pytest.mark.parametrize("name", list(ALL))
def test_every_agent_container_can_reach_its_collector(name: str) -> None:
    for image, command in image_runs(ALL[name]):
        if "--collector collector:" in command:
            assert "--network gpubench" in command, f"{name}: {image} off the compose network"
        if "--collector 127.0.0.1:" in command:
            assert "--network host" in command, f"{name}: {image} reaches its own loopback"


@pytest.mark.parametrize("name", list(ALL))
def test_compose_is_always_given_the_file(name: str) -> None:
    for command in commands(ALL[name]):
        if "docker compose" in command:
            assert "-f docker/compose.yaml" in command, f"{name}: {command}"


def test_localising_finds_what_it_changes() -> None:
    names = Names(network="n1", spool_volume="s1", port=1234, compose_v2=False)
    text = localise("agent-host-network", ALL["agent-host-network"], names,
                    expect=("spool", "port"))
    assert "-v s1:/var/lib/gpubench/spool" in text and "127.0.0.1:1234" in text
    with pytest.raises(AssertionError, match="no longer has the network"):
        localise("agent-host-network", ALL["agent-host-network"], names, expect=("network",))
    collector = localise("collector", ALL["collector"], names, expect=("compose",))
    assert "docker compose" not in collector and "docker-compose -f" in collector
