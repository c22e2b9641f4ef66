"""gpubench: a standard GPU training benchmark, an agent that runs it, and a collector.

The shared package holds what both sides need: the generated wire code
(`gpubench.v1`), the run record helpers (`gpubench.record`), the user-facing
errors (`gpubench.errors`), the Python query client (`gpubench.Client`) and the
`gpubench` query CLI. The agent (`gpubench.agent`) and the collector
(`gpubench.collector`) are parts of the same package that live in folders of their
own: agent/gpubench/agent/ and collector/gpubench/collector/. Installed, they lie
beside this folder; in a checkout they are found where they are (below), so
`python -m gpubench.agent.cli` runs from a plain checkout.
"""

from __future__ import annotations

from pathlib import Path
from pkgutil import extend_path
from typing import TYPE_CHECKING, Any

# The package's parts: their gpubench/ folders on sys.path (pkgutil's namespace
# lookup), and in a checkout the agent's and the collector's beside this folder.
__path__ = extend_path(__path__, __name__)
_CHECKOUT = Path(__file__).resolve().parent.parent
for _part in ("agent", "collector"):
    _folder = str(_CHECKOUT / _part / "gpubench")
    if _folder not in __path__ and Path(_folder).is_dir():
        __path__.append(_folder)

__version__ = "0.1.0"

# The name pip knows the project by (pyproject.toml's project.name): PyPI's "gpubench"
# is another project. Installed, `pip install 'gpubench-keras[EXTRA]'` adds an extra's
# dependencies to this copy.
DISTRIBUTION = "gpubench-keras"

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


__all__ = ["BENCHMARK_VERSION", "DISTRIBUTION", "SCHEMA_VERSION", "Client", "__version__"]
