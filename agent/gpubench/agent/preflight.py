"""Before any training: does the collector answer, and does it take runs from this token?

A refused token stops `gpubench-agent run` in seconds with exit 4, instead of after
a benchmark whose runs could never be sent. An unreachable collector is said up
front, with the spool folder the runs will wait in: the benchmark still runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpubench.errors import AccessDenied, CollectorUnavailable, GpubenchError
from gpubench.versions import SCHEMA_VERSION


@dataclass(frozen=True)
class Preflight:
    """What the check found: whether runs can be sent now, and a line for the console."""

    reachable: bool
    message: str
    error: GpubenchError | None = None  # why the collector cannot be reached now


def check_collector(client_factory: Callable[[], Any], address: str, spool: Path) -> Preflight:
    """Ask the collector who the token is (one cheap authenticated call).

    Raises AccessDenied (exit 4) when the token is missing, wrong, revoked or may
    not submit runs. Returns Preflight(reachable=False, ...) when the collector
    cannot be reached or does not know the call (an older collector).
    """
    try:
        with client_factory() as client:
            access = client.check_access()
    except AccessDenied as exc:
        raise AccessDenied(f"{exc}. Nothing was run (--offline runs without a collector)"
                           ) from None
    except CollectorUnavailable as exc:
        return Preflight(False, f"{exc}. The runs will wait in {spool}, and `gpubench-agent "
                                "push` sends them later", exc)
    except GpubenchError as exc:
        if getattr(exc, "status_code", "") != "UNIMPLEMENTED":
            raise
        return Preflight(True, f"the collector at {address} cannot check the token before the "
                               "run (an older collector): a refused token shows after it")
    if not access.may_submit:
        raise AccessDenied(f"the collector at {address} does not take runs from token "
                           f"{access.token_name!r}; nothing was run")
    if access.schema_version < SCHEMA_VERSION:
        raise GpubenchError(
            f"the collector at {address} (gpubench {access.collector_version}) reads run "
            f"records up to schema {access.schema_version}; this agent writes schema "
            f"{SCHEMA_VERSION}: upgrade the collector, or run with --offline and push later; "
            "nothing was run")
    return Preflight(True, f"collector {address}: token {access.token_name!r} may submit runs")
