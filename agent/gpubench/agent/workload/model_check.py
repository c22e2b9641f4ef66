"""Before any training: can gpubench build and feed the model --models names?

The EfficientNets always can. Any other model is built once on the CPU in a `check`
process of its own (its framework import and the build leave nothing behind in the
run's process, whose framework the batch search's trials must find unloaded), which
prints the model's identity or refuses (exit 2) saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, replace
from typing import Any

from gpubench import models
from gpubench.agent.workload.failure import Refused
from gpubench.errors import GpubenchError
from gpubench.events import ErrorEvent, EventSink, LogEvent, parse_line
from gpubench.settings import EXIT_OK, EXIT_REFUSED, WORKLOAD_MODULE, RunSettings, arguments

CHECK_TIMEOUT_SECONDS = 600.0
# The line of the check's stdout that carries the model's identity.
IDENTITY_PREFIX = "model: "


def check_settings(settings: RunSettings) -> RunSettings:
    """The run's settings as the check builds the model: on the CPU."""
    return replace(settings, gpus=0, memory_limit_bytes=None, cuda_graphs=False,
                   replicas_on_cpu=0, data_on_device=False)


def check(settings: RunSettings) -> dict[str, Any]:
    """The model's identity (custom.identity), checked in a `check` process; {} for an
    EfficientNet. Refused where it cannot be built or fed, naming why."""
    if models.is_efficientnet(settings.model):
        return {}
    command = [sys.executable, "-m", WORKLOAD_MODULE, "check",
               *arguments("trial", asdict(check_settings(settings)))]
    done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ),
                          timeout=CHECK_TIMEOUT_SECONDS, check=False)
    events = [e for e in map(parse_line, done.stdout.splitlines()) if e is not None]
    errors = [e.message for e in events if isinstance(e, ErrorEvent)]
    if done.returncode == EXIT_REFUSED:
        raise Refused(errors[-1] if errors else f"--models {settings.model}: refused")
    said = [e.message for e in events if isinstance(e, LogEvent)
            and e.message.startswith(IDENTITY_PREFIX)]
    if done.returncode != EXIT_OK or not said:
        last = errors[-1] if errors else " | ".join(done.stderr.strip().splitlines()[-3:])
        raise GpubenchError(f"--models {settings.model}: building it failed (exit "
                            f"{done.returncode}): {last[-500:]}")
    found: dict[str, Any] = json.loads(said[-1].removeprefix(IDENTITY_PREFIX))
    return found


def check_main(settings: RunSettings, events: EventSink) -> int:
    """The `check` command: build and compile the model on the CPU and say its identity
    as one log event; refused (exit 2) with one error event."""
    from gpubench.agent.workload import backend
    from gpubench.agent.workload.failure import report_failure

    try:
        backend.select(settings.backend, 0)
        backend.import_keras()
        from gpubench.agent.workload.network import prepare_network

        network, _ = prepare_network(check_settings(settings))
        events.emit(LogEvent(message=IDENTITY_PREFIX + json.dumps(network.gpubench_identity)))
        return EXIT_OK
    except Exception as exc:
        return report_failure(events, exc)
