# The collector: stores everyone's runs in a DuckDB file on a volume and answers comparisons.
# Only the collector's dependencies and its results site's (no framework, no NVML); runs as
# a non-root user. The same image serves the site: `gpubench-collector web` (compose.yaml).
#
#   docker build -f docker/collector.Dockerfile -t gpubench-collector .
#   docker run -d -v gpubench-data:/data -p 50051:50051 gpubench-collector
#   docker exec CONTAINER gpubench-collector token create alice
#
# Stopping the container (SIGTERM to the collector, PID 1) lets in-flight calls finish and
# checkpoints the database. The default command serves plaintext (--insecure): put it behind
# TLS, or give --tls-cert/--tls-key (files mounted into the container) in its place.
# Where no registry is reachable see docker/agent.Dockerfile (BASE_IMAGE, the pipcert secret).
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
    && python3 /tmp/build/requirements.py /tmp/build/pyproject.toml collector web > /tmp/build/requirements.txt \
    && python3 -m pip --python /opt/gpubench/bin/python install -r /tmp/build/requirements.txt
COPY pyproject.toml setup.py README.md /src/
COPY docker/wire_requirements.py /src/docker/
COPY protos /src/protos
COPY gpubench /src/gpubench
COPY collector /src/collector
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
    && /opt/gpubench/bin/python -c "import gpubench.collector.cli, grpc, duckdb, grpc_health, gpubench.v1.run_pb2"
# What a running collector never uses: the packages' own test suites.
RUN find /opt/gpubench -depth -type d -name tests -path '*/site-packages/*' -exec rm -rf {} +

FROM ${BASE_IMAGE}
RUN groupadd --system --gid 10001 gpubench \
    && useradd --system --uid 10001 --gid gpubench --home-dir /data --no-create-home gpubench \
    && mkdir /data && chown gpubench:gpubench /data
COPY --from=build /opt/gpubench /opt/gpubench
# The health check; also `gpubench-healthcheck --wait 60` for scripts that need it serving.
COPY docker/healthcheck.py /opt/gpubench/bin/gpubench-healthcheck
# `serve` and `token ...` (run with docker exec) find the database through this.
ENV PATH=/opt/gpubench/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    GPUBENCH_COLLECTOR_DB=/data/gpubench.duckdb
# By number (the user gpubench made above): an orchestrator checking that the image runs
# as non-root (Kubernetes' runAsNonRoot) can tell from the number alone.
USER 10001:10001
WORKDIR /data
VOLUME /data
EXPOSE 50051
HEALTHCHECK --interval=5s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/opt/gpubench/bin/gpubench-healthcheck"]
# What the image is, in the OCI's words (docker/build.sh, and the release workflow, pass
# the version, the commit, the time of the build and the source repository).
ARG GPUBENCH_VERSION=0.0
ARG GPUBENCH_REVISION=
ARG GPUBENCH_CREATED=
ARG GPUBENCH_SOURCE=
LABEL org.opencontainers.image.title="gpubench-collector" \
      org.opencontainers.image.description="The gpubench collector: stores the benchmark runs in DuckDB and answers comparisons; its results site" \
      org.opencontainers.image.version="${GPUBENCH_VERSION}" \
      org.opencontainers.image.revision="${GPUBENCH_REVISION}" \
      org.opencontainers.image.created="${GPUBENCH_CREATED}" \
      org.opencontainers.image.source="${GPUBENCH_SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
# Exec form: the collector is PID 1 and gets the SIGTERM of `docker stop` itself.
ENTRYPOINT ["gpubench-collector"]
CMD ["serve", "--host", "0.0.0.0", "--port", "50051", "--insecure"]
