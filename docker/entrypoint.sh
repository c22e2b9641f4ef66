#!/bin/sh
# Entry point of the agent and workload images.
#
# Flags alone (`docker run -e GPUBENCH_TOKEN IMAGE --collector HOST:50051`) are for
# `gpubench-agent run`, after this image's defaults in GPUBENCH_RUN_DEFAULTS (later flags
# win). Anything else is a command to run as it is (`docker run IMAGE gpubench-agent --help`,
# `python -m gpubench.agent.workload run ...`). exec: the command gets the signals.
set -e
case "${1:-}" in
    "" | -*)
        # shellcheck disable=SC2086  # the defaults are a list of words
        set -- gpubench-agent run ${GPUBENCH_RUN_DEFAULTS:-} "$@"
        ;;
esac
# Before `run` and `push`: a note when the spool is not on a volume, or when a loopback
# collector address does not answer (docker/container_check.py). Never stops the command.
gpubench-container-check "$@" || true
exec "$@"
