"""The shell blocks of docker/README.md: the documented commands the container tests run.

Each ```bash block of docker/README.md follows a tag `<!-- block: NAME -->` (an HTML
comment: not shown on the rendered page). The tests run the blocks by name as they are
written, with only these changes, each of which must find what it changes (so a README
edit that moves one fails loudly instead of running the user's own names):

- the test's own network, spool volume and published port in place of `gpubench`,
  `gpubench-spool` and 50051 (a developer's own collector and runs are left alone);
- `docker-compose` in place of `docker compose` where Compose v2 is not installed (the
  README says the two take the same arguments).

Compose's own names (project, data volume, network, published address) come from the
environment that compose.yaml reads, which the tests set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "docker" / "README.md"

TAGGED = re.compile(r"<!-- block: ([a-z0-9-]+) -->\n```bash\n(.*?)^```", re.S | re.M)
FENCE = re.compile(r"^```bash$", re.M)
IMAGE_RUN = re.compile(r"\bdocker run\b.*?\b(gpubench-agent|gpubench-workload)\b")

NETWORK = re.compile(r"--network gpubench\b")
SPOOL_VOLUME = re.compile(r"\bgpubench-spool:")
PUBLISHED = re.compile(r"\b127\.0\.0\.1:50051\b")
COMPOSE_V2 = re.compile(r"\bdocker compose\b")

SPOOL_MOUNT = "gpubench-spool:/var/lib/gpubench/spool"

# The blocks test_containers.py runs, in the README's order...
RUN_BY_TESTS = ("collector", "agent-cpu", "runs-list", "workload-cpu", "push",
                "agent-host-network")
# ... and those it does not, with the reason.
NOT_RUN = {
    "build": "the fixtures run its `make -C docker LOCAL_BASE=1` line, one image at a time",
    "gpu-agent": "needs an NVIDIA GPU and its toolkit; checked without docker "
                 "(test_readme_blocks.py)",
    "gpu-agent-devices": "needs an NVIDIA GPU: bench/h200_docker.sh runs it as written on "
                         "a GPU machine without the toolkit (tests/gpu/test_gpu_containers.py)",
    "gpu-agent-model": "needs an NVIDIA GPU: bench/h200_docker.sh custom-model-container "
                       "runs it as written, the model's folder mounted at another path",
}


def blocks(readme: Path = README) -> dict[str, str]:
    """The blocks by name, in the order of the file; every bash block must be tagged."""
    text = readme.read_text()
    found: dict[str, str] = {}
    for match in TAGGED.finditer(text):
        name, body = match.groups()
        if name in found:
            raise AssertionError(f"{readme}: two blocks are tagged {name!r}")
        found[name] = body
    fences = len(FENCE.findall(text))
    if fences != len(found):
        raise AssertionError(
            f"{readme}: {fences} bash blocks, {len(found)} tagged `<!-- block: NAME -->` "
            "on the line before: tag every one (the tests run them by name)"
        )
    return found


def commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines left out."""
    joined = re.sub(r"\\\n\s*", " ", block)
    found = []
    for line in joined.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            found.append(line)
    return found


def image_runs(block: str) -> list[tuple[str, str]]:
    """(image, command) for every `docker run` of the agent or workload image in a block."""
    found = []
    for command in commands(block):
        match = IMAGE_RUN.search(command)
        if match:
            found.append((match.group(1), command))
    return found


@dataclass(frozen=True)
class Names:
    """The names a test uses in place of the README's."""

    network: str
    spool_volume: str
    port: int
    compose_v2: bool


def _replace(pattern: re.Pattern[str], new: str, text: str, what: str, name: str) -> str:
    changed, count = pattern.subn(new, text)
    if not count:
        raise AssertionError(
            f"block {name!r} of {README.name} no longer has {what} ({pattern.pattern!r}): "
            "update tests/docker/readme_blocks.py with it"
        )
    return changed


def localise(name: str, block: str, names: Names, *, expect: tuple[str, ...]) -> str:
    """The block with the test's names; `expect` says which of 'network', 'spool', 'port'
    and 'compose' it must contain. Compose v1 replaces v2 wherever it appears."""
    text = block
    if "network" in expect:
        text = _replace(NETWORK, f"--network {names.network}", text, "the network", name)
    if "spool" in expect:
        text = _replace(SPOOL_VOLUME, f"{names.spool_volume}:", text, "the spool volume", name)
    if "port" in expect:
        address = f"127.0.0.1:{names.port}"
        text = _replace(PUBLISHED, address, text, "the published address", name)
    if "compose" in expect:
        text = _replace(COMPOSE_V2, "docker compose", text, "docker compose", name)
    if not names.compose_v2:
        text = COMPOSE_V2.sub("docker-compose", text)
    return text
