"""docker/compose.yaml's public collector (profile "edge"): the collector, the results site
and HAProxy in front of both, from images built here on the local base; a run submitted
through the edge over TLS is read back through it, and the site answers through it."""

from __future__ import annotations

import http.client
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dockerhost import DOCKER, TAG, StageClock, run
from edge import HOSTNAME, self_signed
from factories import make_run

from gpubench.client import Client

pytestmark = [pytest.mark.docker, pytest.mark.timeout(2400)]

COMPOSE = ["docker-compose", "-f", "docker/compose.yaml"]
UP_WITHIN_S = 180.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class EdgeStack:
    """The compose stack under this test's own names and ports."""

    env: dict[str, str]
    grpc_port: int
    site_port: int
    ca: Path

    def compose(self, *args: str, timeout: float = 300) -> str:
        return run([*COMPOSE, *args], timeout=timeout, env=self.env).stdout

    def site(self, path: str) -> int:
        """The status of a GET of the site through the edge (TLS)."""
        import ssl

        context = ssl.create_default_context(cafile=str(self.ca))
        connection = http.client.HTTPSConnection(HOSTNAME, self.site_port, context=context,
                                                 timeout=30)
        try:
            connection.request("GET", path)
            answer = connection.getresponse()
            answer.read()
            return answer.status
        finally:
            connection.close()


@pytest.fixture(scope="module")
def edge_images(docker_engine: str, stage: StageClock) -> dict[str, str]:
    """gpubench-collector and gpubench-edge, built on the local base image (cached)."""
    with stage("base image (debootstrap + import, cached)"):
        run(["docker/base-image.sh"], timeout=900)
    for name in ("collector", "edge"):
        with stage(f"build gpubench-{name}"):
            run(["make", "-s", "-C", "docker", "LOCAL_BASE=1", f"TAG={TAG}", name],
                timeout=1200)
    return {"collector": f"gpubench-collector:{TAG}", "edge": f"gpubench-edge:{TAG}"}


@pytest.fixture(scope="module")
def stack(edge_images: dict[str, str], stage: StageClock,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeStack]:
    bundle, ca = self_signed(tmp_path_factory.mktemp("edge"))
    project = f"gpubench-edge-test-{os.getpid()}"
    grpc_port, site_port = free_port(), free_port()
    env = {
        "COMPOSE_PROJECT_NAME": project,
        "GPUBENCH_COLLECTOR_IMAGE": edge_images["collector"],
        "GPUBENCH_EDGE_IMAGE": edge_images["edge"],
        "GPUBENCH_VOLUME": f"{project}-data",
        "GPUBENCH_SPOOL_VOLUME": f"{project}-spool",
        "GPUBENCH_NETWORK": f"{project}-net",
        "GPUBENCH_LISTEN": f"127.0.0.1:{free_port()}",
        "GPUBENCH_SITE_LISTEN": f"127.0.0.1:{free_port()}",
        "GPUBENCH_EDGE_GRPC_LISTEN": f"127.0.0.1:{grpc_port}",
        "GPUBENCH_EDGE_SITE_LISTEN": f"127.0.0.1:{site_port}",
        "GPUBENCH_EDGE_CERT": str(bundle),  # 0600, this user's: the edge reads it as root
        "PATH": os.environ["PATH"],
    }
    deployed = EdgeStack(env, grpc_port, site_port, ca)
    try:
        with stage("compose --profile edge up: collector, site, edge"):
            deployed.compose("--profile", "edge", "up", "-d", timeout=600)
            deadline = time.monotonic() + UP_WITHIN_S
            while True:
                try:
                    if deployed.site("/healthz") == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    logs = run([*COMPOSE, "--profile", "edge", "logs", "--tail", "40"],
                               timeout=60, env=env, check=False).stdout
                    raise AssertionError(f"the site did not answer through the edge within "
                                         f"{UP_WITHIN_S:.0f} s:\n{logs}")
                time.sleep(1)
        yield deployed
    finally:
        run([*COMPOSE, "--profile", "edge", "down", "--volumes", "--remove-orphans",
             "--timeout", "30"], timeout=180, check=False, env=env)
        run([DOCKER, "volume", "rm", "-f", env["GPUBENCH_VOLUME"], env["GPUBENCH_SPOOL_VOLUME"]],
            timeout=30, check=False)


def test_a_run_submitted_through_the_edge_is_read_back(stack: EdgeStack) -> None:
    token = stack.compose("exec", "-T", "collector", "gpubench-collector", "token", "create",
                          "alice").strip().splitlines()[-1]
    assert token.startswith("gpb_"), token
    with Client(f"{HOSTNAME}:{stack.grpc_port}", token, ca=stack.ca, timeout=30) as client:
        ack = client.submit_run(make_run())
        stored = client.get_run(ack.run_id)
    assert stored.submitter == "alice"
    assert stored.run.run_id == ack.run_id
    assert stack.site("/healthz") == 200


def test_a_wrong_token_through_the_edge_is_counted_by_the_clients_address(
        stack: EdgeStack) -> None:
    """The collector names the client's address (this host's, as the edge saw it), not
    the edge container's, in its refusal past the failed-authentication limit."""
    import grpc

    from gpubench.v1 import collector_pb2 as pb
    from gpubench.v1 import collector_pb2_grpc as pb_grpc

    credentials = grpc.ssl_channel_credentials(stack.ca.read_bytes())
    details = []
    with grpc.secure_channel(f"{HOSTNAME}:{stack.grpc_port}", credentials) as channel:
        stub = pb_grpc.CollectorStub(channel)
        for n in range(40):  # the default allowance is 30 a minute
            try:
                stub.CheckAccess(pb.CheckAccessRequest(), timeout=30,
                                 metadata=(("authorization", f"Bearer gpb_wrong{n}"),))
            except grpc.RpcError as exc:
                details.append(exc.details())
                if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    break
    said = " ".join(details[-1].split())
    assert "too many failed authentications from" in said, details[-3:]
    edge_address = stack.compose("exec", "-T", "collector", "python3", "-c",
                                 "import socket; print(socket.gethostbyname('edge'))").strip()
    assert f"from {edge_address} " not in said
