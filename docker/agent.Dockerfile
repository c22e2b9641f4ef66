# The agent: runs on a GPU host, starts the workload image through the host's docker socket,
# samples the GPUs through NVML and pushes each run to a collector. No framework in here
# (target: under 300 MB).
#
#   docker build -f docker/agent.Dockerfile -t gpubench-agent .
#   docker run --gpus all -v /var/run/docker.sock:/var/run/docker.sock gpubench-agent \
#       --collector HOST:50051 --token T
#
# Where no registry is reachable, build FROM a local base (docker/base-image.sh) and hand
# pip the machine's CA bundle:
#   DOCKER_BUILDKIT=1 docker build --build-arg BASE_IMAGE=gpubench-base:... \
#       --secret id=pipcert,src=/etc/ssl/certs/ca-certificates.crt -f docker/agent.Dockerfile .
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=120
RUN python3 -m venv /opt/gpubench
# Dependencies first, in their own layer: a change to the code does not reinstall them.
COPY pyproject.toml docker/requirements.py /tmp/build/
RUN --mount=type=secret,id=pipcert --mount=type=cache,id=gpubench-pip,target=/root/.cache/pip \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi; \
    python3 /tmp/build/requirements.py /tmp/build/pyproject.toml agent > /tmp/build/requirements.txt \
    && /opt/gpubench/bin/pip install -r /tmp/build/requirements.txt
COPY pyproject.toml setup.py README.md /src/
COPY protos /src/protos
COPY gpubench /src/gpubench
COPY agent /src/agent
# The wheel build generates the wire code from protos/ (grpcio-tools, a build requirement).
RUN --mount=type=secret,id=pipcert --mount=type=cache,id=gpubench-pip,target=/root/.cache/pip \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi; \
    /opt/gpubench/bin/pip wheel --no-deps -w /tmp/wheels /src \
    && /opt/gpubench/bin/pip install --no-deps /tmp/wheels/*.whl \
    && /opt/gpubench/bin/pip check
# What a running agent never uses: the installer and the packages' own test suites
# (pandas' alone is 46 MB).
RUN /opt/gpubench/bin/pip uninstall -q -y pip setuptools \
    && find /opt/gpubench -depth -type d -name tests -path '*/site-packages/*' -exec rm -rf {} +

FROM ${BASE_IMAGE}
COPY --from=build /opt/gpubench /opt/gpubench
COPY docker/entrypoint.sh /usr/local/bin/gpubench-entrypoint
COPY docker/container_check.py /usr/local/bin/gpubench-container-check
# Runs wait in the spool until the collector has them: mount a volume there
# (-v gpubench-spool:/var/lib/gpubench/spool) to keep unsent runs across containers.
ENV PATH=/opt/gpubench/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    GPUBENCH_SPOOL=/var/lib/gpubench/spool \
    GPUBENCH_RUN_DEFAULTS="--runner docker --image gpubench-workload:latest"
# Root: the agent talks to the host's docker socket, which only root (or the docker group,
# whose id differs between hosts) may use.
# `docker stop` sends SIGINT, which the agent handles as Ctrl-C: it removes the workload
# container and keeps what it has in the spool. The agent is PID 1 here, and the kernel
# drops a SIGTERM that PID 1 has no handler for: the stop would end in SIGKILL after the
# grace period and leave the workload container training.
STOPSIGNAL SIGINT
ENTRYPOINT ["gpubench-entrypoint"]
CMD ["--help"]
