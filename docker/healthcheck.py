#!/usr/bin/env python3
"""Exit 0 when the collector in this container answers SERVING on the gRPC health service.

The collector image's HEALTHCHECK, and on its PATH as `gpubench-healthcheck`:

    gpubench-healthcheck             ask once (what docker's health check runs)
    gpubench-healthcheck --wait 60   ask every second until SERVING, for 60 s at most

`--wait` is for scripts that start the collector and then use it at once
(`docker compose up -d` returns before the collector serves; Compose v1 has no `--wait`):
a `token create` that runs before `serve` holds the database would open the file itself.
Address: $GPUBENCH_HEALTH_ADDRESS, default 127.0.0.1:50051 (plaintext: the container's own
loopback). Prints one line saying what it found, which `docker inspect` shows.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ADDRESS_ENV = "GPUBENCH_HEALTH_ADDRESS"
DEFAULT_ADDRESS = "127.0.0.1:50051"
TIMEOUT_S = 3.0
POLL_S = 1.0


def check(address: str, timeout: float = TIMEOUT_S) -> str:
    """The serving status of the collector at `address` ('SERVING', 'NOT_SERVING', ...)."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def status_line(address: str) -> tuple[bool, str]:
    """Whether the collector serves, and a line saying what was found."""
    try:
        status = check(address)
    except grpc.RpcError as exc:
        return False, f"collector at {address}: {exc.code().name} ({exc.details()})"
    return status == "SERVING", f"collector at {address}: {status}"


def main(argv: list[str] | None = None) -> int:
    """Print the status; exit 0 only when SERVING (within --wait seconds, if given)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--wait", type=float, default=0.0, metavar="SECONDS",
        help="ask every second until the collector serves, for this long at most",
    )  # fmt: skip
    args = parser.parse_args(argv)
    address = os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS
    deadline = time.monotonic() + args.wait
    while True:
        serving, line = status_line(address)
        if serving or time.monotonic() + POLL_S > deadline:
            break
        time.sleep(POLL_S)
    if args.wait and not serving:
        line += f"; not serving after {args.wait:.0f} s"
    print(line)
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
