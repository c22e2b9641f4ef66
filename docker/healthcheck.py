"""Exit 0 when the collector in this container answers SERVING on the gRPC health service.

The collector image's HEALTHCHECK: `python -m` is not needed, the script runs as it is.
Address: $GPUBENCH_HEALTH_ADDRESS, default 127.0.0.1:50051 (plaintext: the container's own
loopback). Prints one line saying what it found, which `docker inspect` shows.
"""

from __future__ import annotations

import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ADDRESS_ENV = "GPUBENCH_HEALTH_ADDRESS"
DEFAULT_ADDRESS = "127.0.0.1:50051"
TIMEOUT_S = 3.0


def check(address: str, timeout: float = TIMEOUT_S) -> str:
    """The serving status of the collector at `address` ('SERVING', 'NOT_SERVING', ...)."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def main() -> int:
    """Print the status; exit 0 only when SERVING."""
    address = os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS
    try:
        status = check(address)
    except grpc.RpcError as exc:
        print(f"collector at {address}: {exc.code().name} ({exc.details()})")
        return 1
    print(f"collector at {address}: {status}")
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
