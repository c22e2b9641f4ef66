"""gpubench: a standard GPU training benchmark, an agent that runs it, and a collector.

The shared package holds what both sides need: the generated wire code
(`gpubench.v1`), the run record helpers (`gpubench.record`), the user-facing
errors (`gpubench.errors`), the Python query client (`gpubench.Client`) and the
`gpubench` query CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The revision of protos/gpubench/v1/run.proto this code writes. Bump it when a
# field's meaning changes; the collector reads every version up to its own.
SCHEMA_VERSION = 2

# The benchmark protocol's version: runs of different versions are not compared
# unless the user asks. Bump it when anything that changes the figures changes.
BENCHMARK_VERSION = "1"

if TYPE_CHECKING:  # pragma: no cover
    from gpubench.client import Client


def __getattr__(name: str) -> Any:
    # The client pulls in grpc and pandas; import it only when asked for.
    if name == "Client":
        from gpubench.client import Client

        return Client
    raise AttributeError(name)


__all__ = ["BENCHMARK_VERSION", "SCHEMA_VERSION", "Client", "__version__"]
