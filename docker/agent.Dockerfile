# The agent: runs on a GPU host, starts the workload image through the host's docker socket,
# samples the GPUs through NVML and pushes each run to a collector. No framework in here
# (target: under 300 MB).
#
#   docker build -f docker/agent.Dockerfile -t gpubench-agent .
#   docker run --gpus all -v /var/run/docker.sock:/var/run/docker.sock -e GPUBENCH_TOKEN \
#       gpubench-agent --collector HOST:50051
#
# Where no registry is reachable, build FROM a local base (docker/base-image.sh) and hand
# pip the machine's CA bundle (docker/build.sh does this; --wheels and --no-index as in
# docker/workload.Dockerfile):
#   DOCKER_BUILDKIT=1 docker build --build-arg BASE_IMAGE=gpubench-base:... \
#       --secret id=pipcert,src=/etc/ssl/certs/ca-certificates.crt -f docker/agent.Dockerfile .
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
ARG PIP_NO_INDEX=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=120 PIP_FIND_LINKS=/wheels \
    PIP_NO_INDEX=${PIP_NO_INDEX}
# Dependencies first, in their own layer: a change to the code does not reinstall them.
# docker/venv.sh: the environment sees the base's packages (none on python:3.11-slim).
COPY pyproject.toml docker/requirements.py docker/venv.sh /tmp/build/
RUN --mount=type=secret,id=pipcert --mount=type=cache,id=gpubench-pip,target=/root/.cache/pip \
    --mount=type=bind,source=docker/wheels,target=/wheels \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi; \
    sh /tmp/build/venv.sh /opt/gpubench \
    && python3 /tmp/build/requirements.py /tmp/build/pyproject.toml agent > /tmp/build/requirements.txt \
    && python3 -m pip --python /opt/gpubench/bin/python install -r /tmp/build/requirements.txt
COPY pyproject.toml setup.py README.md /src/
COPY docker/wire_requirements.py /src/docker/
COPY protos /src/protos
COPY gpubench /src/gpubench
COPY agent /src/agent
# The version (docker/build.sh passes the checkout's, the git tag's): the build context has
# no git to read it from. The wheel, the commands' --version and the labels carry it.
ARG GPUBENCH_VERSION=0.0
# GPUBENCH_WHEEL: the name of a gpubench wheel in docker/wheels/ to install instead of one
# built here from the sources (the release installs the very wheel it publishes to PyPI).
ARG GPUBENCH_WHEEL=
# The wheel build generates the wire code from protos/ (grpcio-tools, a build requirement);
# then the grpcio and protobuf that code needs (a base's own may be older).
RUN --mount=type=secret,id=pipcert --mount=type=cache,id=gpubench-pip,target=/root/.cache/pip \
    --mount=type=bind,source=docker/wheels,target=/wheels \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi; \
    if [ -n "${GPUBENCH_WHEEL}" ]; then mkdir -p /tmp/wheels && cp "/wheels/${GPUBENCH_WHEEL}" /tmp/wheels/; \
    else SETUPTOOLS_SCM_PRETEND_VERSION="${GPUBENCH_VERSION}" \
        python3 -m pip wheel --no-deps -w /tmp/wheels /src; fi \
    && python3 -m pip --python /opt/gpubench/bin/python install --no-deps --no-index \
        /tmp/wheels/*.whl \
    && python3 /src/docker/wire_requirements.py /tmp/wheels/*.whl > /tmp/wire.txt \
    && python3 -m pip --python /opt/gpubench/bin/python install -r /tmp/wire.txt \
    && /opt/gpubench/bin/python -c "import gpubench.agent.cli, grpc, docker, pynvml, gpubench.v1.run_pb2"
# What a running agent never uses: the packages' own test suites (pandas' alone is 46 MB).
RUN find /opt/gpubench -depth -type d -name tests -path '*/site-packages/*' -exec rm -rf {} +

FROM ${BASE_IMAGE}
COPY --from=build /opt/gpubench /opt/gpubench
COPY docker/entrypoint.sh /usr/local/bin/gpubench-entrypoint
COPY docker/container_check.py /usr/local/bin/gpubench-container-check
# The workload image the agent starts (--image overrides it): the local build's, or the
# published one of the same version (the release workflow passes it).
ARG WORKLOAD_IMAGE=gpubench-workload:latest
# Runs wait in the spool until the collector has them: mount a volume there
# (-v gpubench-spool:/var/lib/gpubench/spool) to keep unsent runs across containers.
ENV PATH=/opt/gpubench/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    GPUBENCH_SPOOL=/var/lib/gpubench/spool \
    GPUBENCH_RUN_DEFAULTS="--runner docker --image ${WORKLOAD_IMAGE}"
# Root: the agent talks to the host's docker socket, which only root (or the docker group,
# whose id differs between hosts) may use.
# `docker stop` sends SIGINT, which the agent handles as Ctrl-C: it removes the workload
# container and keeps what it has in the spool. The agent is PID 1 here, and the kernel
# drops a SIGTERM that PID 1 has no handler for: the stop would end in SIGKILL after the
# grace period and leave the workload container training.
STOPSIGNAL SIGINT
# What the image is, in the OCI's words (docker/build.sh, and the release workflow, pass
# the version, the commit, the time of the build and the source repository).
ARG GPUBENCH_VERSION=0.0
ARG GPUBENCH_REVISION=
ARG GPUBENCH_CREATED=
ARG GPUBENCH_SOURCE=
LABEL org.opencontainers.image.title="gpubench-agent" \
      org.opencontainers.image.description="The gpubench agent: runs the benchmark image on a GPU host, samples the GPUs through NVML, pushes each run to a collector" \
      org.opencontainers.image.version="${GPUBENCH_VERSION}" \
      org.opencontainers.image.revision="${GPUBENCH_REVISION}" \
      org.opencontainers.image.created="${GPUBENCH_CREATED}" \
      org.opencontainers.image.source="${GPUBENCH_SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENTRYPOINT ["gpubench-entrypoint"]
CMD ["--help"]
