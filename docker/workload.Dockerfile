# The workload: the benchmark itself, with TensorFlow and its CUDA libraries. The agent starts
# this image for every run and records its digest: two results are comparable when they ran
# the same image. It also carries the agent, so that on a host with no docker socket to share
#   docker run --gpus all gpubench-workload --collector HOST:50051 --token T
# runs the benchmark in-process (the local runner) and pushes the run.
#
#   docker build -f docker/workload.Dockerfile -t gpubench-workload .
#
# BASE_IMAGE defaults to the official TensorFlow GPU image, whose TensorFlow is used as it
# is. On a base without TensorFlow, name the build to install with TF_PACKAGE; where no
# registry is reachable (docker/base-image.sh makes the base):
#   DOCKER_BUILDKIT=1 docker build --build-arg BASE_IMAGE=gpubench-base:... \
#       --build-arg TF_PACKAGE=tensorflow-cpu==2.21.0 \
#       --secret id=pipcert,src=/etc/ssl/certs/ca-certificates.crt -f docker/workload.Dockerfile .
ARG BASE_IMAGE=tensorflow/tensorflow:2.21.0-gpu

FROM ${BASE_IMAGE} AS wheel
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=120
COPY pyproject.toml setup.py README.md /src/
COPY protos /src/protos
COPY gpubench /src/gpubench
COPY agent /src/agent
# The wheel build generates the wire code from protos/ (grpcio-tools, a build requirement).
RUN --mount=type=secret,id=pipcert --mount=type=cache,id=gpubench-pip,target=/root/.cache/pip \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi; \
    python3 -m pip wheel --no-deps -w /wheels /src

FROM ${BASE_IMAGE}
ARG TF_PACKAGE=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=120
# A virtual environment that sees the base image's packages (its TensorFlow, if it has one).
# --without-pip and the base's own pip: images such as TensorFlow's lack ensurepip.
# Dependencies first, in their own layer: a change to the code does not reinstall TensorFlow.
COPY pyproject.toml docker/requirements.py /tmp/build/
RUN --mount=type=secret,id=pipcert --mount=type=cache,id=gpubench-pip,target=/root/.cache/pip \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi; \
    python3 -m venv --system-site-packages --without-pip /opt/gpubench \
    && python3 /tmp/build/requirements.py /tmp/build/pyproject.toml agent workload \
        ${TF_PACKAGE:+--replace "tensorflow=${TF_PACKAGE}"} > /tmp/build/requirements.txt \
    && python3 -m pip --python /opt/gpubench/bin/python install -r /tmp/build/requirements.txt \
    && rm -rf /tmp/build
RUN --mount=type=bind,from=wheel,source=/wheels,target=/tmp/wheels \
    python3 -m pip --python /opt/gpubench/bin/python install --no-deps --no-cache-dir /tmp/wheels/*.whl
COPY docker/entrypoint.sh /usr/local/bin/gpubench-entrypoint
COPY docker/container_check.py /usr/local/bin/gpubench-container-check
ENV PATH=/opt/gpubench/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TF_CPP_MIN_LOG_LEVEL=1 \
    GPUBENCH_SPOOL=/var/lib/gpubench/spool \
    GPUBENCH_RUN_DEFAULTS="--runner local"
# `docker stop` sends SIGINT, which the agent handles as Ctrl-C (the training process is
# stopped, the spool kept); PID 1 would not see a SIGTERM it has no handler for.
STOPSIGNAL SIGINT
ENTRYPOINT ["gpubench-entrypoint"]
CMD ["--help"]
