# The workload: the benchmark itself, on one framework. The agent starts this image for
# every run and records its digest: two results are comparable when they ran the same
# image. It also carries the agent, so that on a host with no docker socket to share
#   docker run <GPU flags> -e GPUBENCH_TOKEN gpubench-workload --collector HOST:50051
# runs the benchmark in-process (the local runner) and pushes the run.
#
# Three builds of it (docker/build.sh makes them all):
#   gpubench-workload:latest      Keras on PyTorch (the default): FROM python:3.12-slim with
#                                 torch's CUDA 12.6 build, whose kernels run on compute
#                                 capability 5.0 to 9.0 (GTX 1070, T4, RTX 6000 Ada, H200)
#   gpubench-workload:cu129       the same with torch's CUDA 12.9 build: compute capability
#                                 7.5 to 12.x, Blackwell included (B200, RTX 50, RTX PRO
#                                 6000); the agent starts it where the default cannot run
#   gpubench-workload:tensorflow  Keras on TensorFlow, the article's framework: FROM the
#                                 official TensorFlow GPU image, whose TensorFlow is kept
#
#   docker build -f docker/workload.Dockerfile -t gpubench-workload .
#   docker build -f docker/workload.Dockerfile -t gpubench-workload:cu129 \
#       --build-arg FRAMEWORK_INDEX=https://download.pytorch.org/whl/cu129 .
#   docker build -f docker/workload.Dockerfile -t gpubench-workload:tensorflow \
#       --build-arg BASE_IMAGE=tensorflow/tensorflow:2.21.0-gpu \
#       --build-arg FRAMEWORK=tensorflow --build-arg FRAMEWORK_PACKAGE=tensorflow==2.21.0 \
#       --build-arg FRAMEWORK_INDEX= .
#
# A base that already has FRAMEWORK (importable by its python3) keeps its own build of
# it; otherwise FRAMEWORK_PACKAGE is installed, from FRAMEWORK_INDEX as well as PyPI.
# Wheels in docker/wheels/ (docker/build.sh --wheels puts them there) are offered to pip
# too, and PIP_NO_INDEX=1 takes them alone, for a machine that reaches no package index:
#   DOCKER_BUILDKIT=1 docker build --build-arg BASE_IMAGE=gpubench-base:... \
#       --build-arg FRAMEWORK_PACKAGE=tensorflow-cpu==2.21.0 --build-arg FRAMEWORK=tensorflow \
#       --secret id=pipcert,src=/etc/ssl/certs/ca-certificates.crt -f docker/workload.Dockerfile .
ARG BASE_IMAGE=python:3.12-slim

FROM ${BASE_IMAGE} AS wheel
ARG PIP_NO_INDEX=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=120 PIP_FIND_LINKS=/wheels \
    PIP_NO_INDEX=${PIP_NO_INDEX}
COPY pyproject.toml setup.py README.md /src/
COPY protos /src/protos
COPY gpubench /src/gpubench
COPY agent /src/agent
# The version (docker/build.sh passes the checkout's, the git tag's): the build context has
# no git to read it from. The wheel, the commands' --version and the labels carry it.
ARG GPUBENCH_VERSION=0.0
# GPUBENCH_WHEEL: the name of a gpubench wheel in docker/wheels/ to install instead of one
# built here from the sources (the release installs the very wheel it publishes to PyPI).
ARG GPUBENCH_WHEEL=
# The wheel build generates the wire code from protos/ (grpcio-tools, a build requirement).
RUN --mount=type=secret,id=pipcert --mount=type=cache,id=gpubench-pip,target=/root/.cache/pip \
    --mount=type=bind,source=docker/wheels,target=/wheels \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi; \
    if [ -n "${GPUBENCH_WHEEL}" ]; then mkdir -p /out && cp "/wheels/${GPUBENCH_WHEEL}" /out/; \
    else SETUPTOOLS_SCM_PRETEND_VERSION="${GPUBENCH_VERSION}" \
        python3 -m pip wheel --no-deps -w /out /src; fi

FROM ${BASE_IMAGE}
ARG FRAMEWORK=torch
ARG FRAMEWORK_PACKAGE=torch==2.13.0
ARG FRAMEWORK_INDEX=https://download.pytorch.org/whl/cu126
ARG PIP_NO_INDEX=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=120 PIP_FIND_LINKS=/wheels \
    PIP_NO_INDEX=${PIP_NO_INDEX}
# A virtual environment that sees the base image's packages (its framework, if it has one):
# docker/venv.sh. Dependencies first, in their own layer: a change to the code does not
# reinstall the framework.
COPY pyproject.toml docker/requirements.py docker/venv.sh /tmp/build/
RUN --mount=type=secret,id=pipcert --mount=type=cache,id=gpubench-pip,target=/root/.cache/pip \
    --mount=type=bind,source=docker/wheels,target=/wheels \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi; \
    sh /tmp/build/venv.sh /opt/gpubench \
    && if python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('${FRAMEWORK}') is None)"; then \
        framework=""; echo "the base image has ${FRAMEWORK}: kept as it is"; \
    else framework="${FRAMEWORK_PACKAGE}"; fi \
    && python3 /tmp/build/requirements.py /tmp/build/pyproject.toml agent workload \
        --replace "tensorflow=${framework}" > /tmp/build/requirements.txt \
    && python3 -m pip --python /opt/gpubench/bin/python install -r /tmp/build/requirements.txt \
        ${FRAMEWORK_INDEX:+--extra-index-url "${FRAMEWORK_INDEX}"} \
    && rm -rf /tmp/build
# The wheel, and the grpcio and protobuf its generated wire code needs (at least the
# generator's: a base's own may be older; docker/wire_requirements.py).
RUN --mount=type=bind,from=wheel,source=/out,target=/tmp/wheels \
    --mount=type=secret,id=pipcert --mount=type=cache,id=gpubench-pip,target=/root/.cache/pip \
    --mount=type=bind,source=docker,target=/tmp/docker \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi; \
    python3 -m pip --python /opt/gpubench/bin/python install --no-deps --no-index \
        --no-cache-dir /tmp/wheels/*.whl \
    && python3 /tmp/docker/wire_requirements.py /tmp/wheels/*.whl > /tmp/wire.txt \
    && python3 -m pip --python /opt/gpubench/bin/python install -r /tmp/wire.txt \
        --find-links /tmp/docker/wheels \
    && rm /tmp/wire.txt \
    && /opt/gpubench/bin/python -c "import gpubench.agent.workload.cli, gpubench.v1.run_pb2"
COPY docker/entrypoint.sh /usr/local/bin/gpubench-entrypoint
COPY docker/container_check.py /usr/local/bin/gpubench-container-check
# What the image is, in the OCI's words (docker/build.sh, and the release workflow, pass
# the version, the commit, the time of the build and the source repository).
ARG GPUBENCH_VERSION=0.0
ARG GPUBENCH_REVISION=
ARG GPUBENCH_CREATED=
ARG GPUBENCH_SOURCE=
LABEL org.opencontainers.image.title="gpubench-workload" \
      org.opencontainers.image.description="The gpubench benchmark (Keras EfficientNet on ${FRAMEWORK}), with the agent: the image the agent starts for every run" \
      org.opencontainers.image.version="${GPUBENCH_VERSION}" \
      org.opencontainers.image.revision="${GPUBENCH_REVISION}" \
      org.opencontainers.image.created="${GPUBENCH_CREATED}" \
      org.opencontainers.image.source="${GPUBENCH_SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
LABEL org.gpubench.framework=${FRAMEWORK}
# The image's one framework is Keras's backend here, as the agent's check finds it.
ENV PATH=/opt/gpubench/bin:$PATH \
    KERAS_BACKEND=${FRAMEWORK} \
    PYTHONUNBUFFERED=1 \
    TF_CPP_MIN_LOG_LEVEL=1 \
    GPUBENCH_SPOOL=/var/lib/gpubench/spool \
    GPUBENCH_RUN_DEFAULTS="--runner local"
# `docker stop` sends SIGINT, which the agent handles as Ctrl-C (the training process is
# stopped, the spool kept); PID 1 would not see a SIGTERM it has no handler for.
STOPSIGNAL SIGINT
ENTRYPOINT ["gpubench-entrypoint"]
CMD ["--help"]
