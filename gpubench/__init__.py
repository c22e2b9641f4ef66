"""gpubench: how much faster would training be on that GPU, and would the model fit?

A notebook or a script asks a collector the questions the `gpubench` command asks, and
gets each answer as a pandas DataFrame. `Client()` connects to $GPUBENCH_COLLECTOR with
the token in $GPUBENCH_TOKEN; `Client("HOST:PORT", token=..., tls=True)` says them
itself. Every comparison pin is a keyword argument (`help(Client.compare)` lists them).

    from gpubench import Client

    with Client() as client:
        compared = client.compare("B0", backend="torch", precision="float32")
        print(compared[["gpu_config", "epoch2_median_s", "speedup"]].to_string())

        ranked = client.leaderboard("B0", backend="torch")
        print(ranked[["rank", "gpu_config", "epoch2_median_s"]].to_string())

        hours = client.estimate("B0", epochs=400)
        print(hours[["gpu_config", "seconds_median"]].to_string())

        fits = client.fit("B0", memory="16GiB")
        print(fits[["label", "verdict", "confidence"]].to_string())

The names below are the API; every other module is the commands' own and may change
between releases. A refused request raises a `GpubenchError` whose message says what to
do; `NotFound` and `RequestRefused` are two of its kinds.
"""

from __future__ import annotations

import pkgutil
from typing import TYPE_CHECKING, Any

# The shared package, the agent and the collector live in three folders (gpubench/,
# agent/gpubench/agent/, collector/gpubench/collector/): from a checkout on PYTHONPATH
# (`.:agent:collector`) each folder named gpubench on the path joins this package, as
# one package installed from a wheel holds all three.
__path__ = pkgutil.extend_path(__path__, __name__)

__all__ = ["Client", "GpubenchError", "NotFound", "RequestRefused", "__version__"]

if TYPE_CHECKING:
    from gpubench.client import Client
    from gpubench.errors import GpubenchError, NotFound, RequestRefused

# Where each public name is defined. They load on first use (PEP 562): the agent's
# workload and the collector import gpubench's modules without paying for the client's
# grpc and pandas.
_DEFINED_IN = {"Client": "gpubench.client", "GpubenchError": "gpubench.errors",
               "NotFound": "gpubench.errors", "RequestRefused": "gpubench.errors"}


def __getattr__(name: str) -> Any:
    import importlib

    if name == "__version__":
        from gpubench.versions import VERSION

        return VERSION
    if name in _DEFINED_IN:
        return getattr(importlib.import_module(_DEFINED_IN[name]), name)
    raise AttributeError(f"module 'gpubench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
