#!/usr/bin/env bash
# Build the images: gpubench-agent, gpubench-workload (Keras on torch for CUDA 12.6, the
# default the agent starts), gpubench-workload:cu129 (torch for CUDA 12.9, which the agent
# starts on Blackwell cards), gpubench-workload:tensorflow (Keras on TensorFlow),
# gpubench-collector and gpubench-edge (HAProxy in front of a public collector, docker/edge/).
#
#   docker/build.sh [OPTIONS] [agent|workload|workload-cu129|workload-tensorflow|collector|edge ...]
#
#   --local-base  build FROM the local base image (docker/base-image.sh makes it; for
#                 machines with no registry), with CPU builds of the frameworks:
#                 tensorflow-cpu, and the torch this machine's pip offers (downloaded
#                 here into docker/wheels/, for the build to take)
#   --base IMAGE  build every image FROM IMAGE, a local image with python3 (3.10 or newer)
#                 and pip; a framework it already has is kept (e.g. a GPU machine's own
#                 root file system, imported, with its CUDA PyTorch)
#   --wheels DIR  offer the wheels in DIR to pip inside the builds (linked into
#                 docker/wheels/, which is part of the build context)
#   --no-index    pip takes the wheels alone and asks no package index
#   --wheel FILE  install this gpubench wheel (a release's: dist/*.whl) in the images
#                 instead of one built from the sources, as the release does; the
#                 version is the wheel's
#   --tag TAG     image tag (default: latest; the other workloads are tagged `cu129` and
#                 `tensorflow`, or TAG-cu129 and TAG-tensorflow)
#   --version V   the version the images' code and labels carry (default: the
#                 checkout's, from its git tag, as its wheel's: setuptools-scm, asked
#                 through $GPUBENCH_PYTHON, .venv/bin/python or python3, the first that
#                 has it; 0.0, unknown, where none has)
#
# Default: every image, FROM the public images named in each Dockerfile (the torch
# workloads' CUDA 12.6 and 12.9 builds from PyTorch's index).
# Environment: GPUBENCH_PIP_CERT (a CA bundle handed to pip inside the builds as a BuildKit
# secret; default: the system's bundle if present), GPUBENCH_BUILD_NETWORK (the build
# steps' network: `host` where the engine has no default bridge, dockerd --bridge=none).
# DOCKER (the docker client; default: /usr/bin/docker if present, else docker on PATH).
# A build that cannot pull its public base image says to use --local-base.
# Every image carries the OCI labels: title, description, version, revision (the commit),
# created, source (the origin remote's address) and licenses.
# Prints how long each image took. Uses Debian's client at /usr/bin/docker when present:
# BuildKit is built into it (a newer client elsewhere on PATH may want a buildx plugin).
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKER=${DOCKER:-/usr/bin/docker}
[[ -x $DOCKER ]] || DOCKER=docker
TORCH=torch==2.13.0
TENSORFLOW=tensorflow==2.21.0
TENSORFLOW_CPU=tensorflow-cpu==2.21.0
TENSORFLOW_BASE=tensorflow/tensorflow:2.21.0-gpu
CU129_INDEX=https://download.pytorch.org/whl/cu129
WHEELS=docker/wheels
tag=latest
local_base=
base=
wheels=
no_index=
wheel=
version=
images=()
usage() { sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; }
while (($#)); do
    case $1 in
        --local-base) local_base=1 ;;
        --base) base=${2:?--base needs an image}; shift ;;
        --wheels) wheels=${2:?--wheels needs a folder}; shift ;;
        --no-index) no_index=1 ;;
        --wheel) wheel=${2:?--wheel needs a file}; shift ;;
        --tag) tag=${2:?--tag needs a tag}; shift ;;
        --version) version=${2:?--version needs a version}; shift ;;
        agent | workload | workload-cu129 | workload-tensorflow | collector | edge) images+=("$1") ;;
        -h | --help) usage; exit 0 ;;
        *) echo "build: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
((${#images[@]})) || images=(agent workload workload-cu129 workload-tensorflow collector edge)
if [[ -n $local_base && -n $base ]]; then
    echo "build: --local-base and --base: choose one" >&2; exit 2
fi

# The checkout's version, as its wheel's would be: the git tag's (pyproject.toml's
# [tool.setuptools_scm]; a copy with no git is "0.0", setuptools-scm's "unknown").
checkout_version() {
    local python
    for python in ${GPUBENCH_PYTHON:-} .venv/bin/python python3; do
        command -v "$python" >/dev/null 2>&1 || continue
        "$python" -m setuptools_scm 2>/dev/null && return 0
    done
    echo "build: no Python here has setuptools-scm to read the version from the git tag:" \
         "the images say 0.0 (unknown); pip install setuptools-scm (make install brings" \
         "it), or give --version" >&2
    echo 0.0
}
if [[ -n $wheel ]]; then
    [[ -f $wheel && $wheel == *.whl ]] || { echo "build: --wheel $wheel: no such wheel" >&2; exit 2; }
    # gpubench_keras-0.2.0-py3-none-any.whl: the version is the wheel's.
    version=$(basename "$wheel" | cut -d- -f2)
    ln -f "$wheel" "$WHEELS/" 2>/dev/null || cp -f "$wheel" "$WHEELS/"
fi
[[ -n $version ]] || version=$(checkout_version)

UNPULLED='load metadata for|failed to (do request|resolve|authorize|fetch)|pull access denied|dial tcp|no such host|i/o timeout|TLS handshake timeout'

# No default bridge on some engines (dockerd --bridge=none): a build step runs on the
# host's network there, given --network host.
common=(--progress=plain ${GPUBENCH_BUILD_NETWORK:+--network "$GPUBENCH_BUILD_NETWORK"})
cert=${GPUBENCH_PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
[[ -s $cert ]] && common+=(--secret "id=pipcert,src=$cert")
[[ -n $no_index ]] && common+=(--build-arg PIP_NO_INDEX=1)
[[ -n $wheel ]] && common+=(--build-arg "GPUBENCH_WHEEL=$(basename "$wheel")")
# The labels' values (the Dockerfiles name them).
common+=(--build-arg "GPUBENCH_VERSION=$version"
         --build-arg "GPUBENCH_REVISION=$(git rev-parse HEAD 2>/dev/null || true)"
         --build-arg "GPUBENCH_CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
         --build-arg "GPUBENCH_SOURCE=$(git remote get-url origin 2>/dev/null || true)")
if [[ -n $wheels ]]; then
    [[ -d $wheels ]] || { echo "build: --wheels $wheels: no such folder" >&2; exit 2; }
    for wheel in "$wheels"/*.whl; do
        [[ -e $wheel ]] || { echo "build: --wheels $wheels: no wheel in it" >&2; exit 2; }
        ln -f "$wheel" "$WHEELS/" 2>/dev/null || cp -f "$wheel" "$WHEELS/"
    done
fi
if [[ -n $local_base ]]; then
    base=$(docker/base-image.sh)
    tensorflow=$TENSORFLOW_CPU
    # PyTorch's own CPU index is out of reach where no registry is; this machine's pip
    # offers what it has (a CPU build where it has one) for the base's Python.
    if ! ls "$WHEELS"/torch-2.13.0*.whl >/dev/null 2>&1 && [[ " ${images[*]} " =~ " workload"(-cu129)?" " ]]; then
        python=$($DOCKER run --rm "$base" python3 -c \
            'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
        echo "build: fetching $TORCH for the local base's Python $python with this machine's pip" >&2
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$python" \
            -d "$WHEELS" "$TORCH" >&2
    fi
else
    tensorflow=$TENSORFLOW
fi

for name in "${images[@]}"; do
    args=("${common[@]}")
    image=gpubench-$name:$tag
    dockerfile=docker/$name.Dockerfile
    case $name in
        workload)
            [[ -n $base ]] && args+=(--build-arg "BASE_IMAGE=$base")
            # The base's own torch where it has one; otherwise the CUDA 12.6 build, or a
            # CPU build (the local base).
            [[ -n $local_base ]] && args+=(--build-arg FRAMEWORK_INDEX=)
            ;;
        workload-cu129)
            image=gpubench-workload:$([[ $tag == latest ]] && echo cu129 || echo "$tag-cu129")
            dockerfile=docker/workload.Dockerfile
            [[ -n $base ]] && args+=(--build-arg "BASE_IMAGE=$base")
            # As the release builds it; the local base's is the CPU build, as the default's.
            args+=(--build-arg "FRAMEWORK_INDEX=$([[ -n $local_base ]] || echo "$CU129_INDEX")")
            ;;
        workload-tensorflow)
            image=gpubench-workload:$([[ $tag == latest ]] && echo tensorflow || echo "$tag-tensorflow")
            dockerfile=docker/workload.Dockerfile
            args+=(--build-arg "BASE_IMAGE=${base:-$TENSORFLOW_BASE}"
                   --build-arg FRAMEWORK=tensorflow --build-arg "FRAMEWORK_PACKAGE=$tensorflow"
                   --build-arg FRAMEWORK_INDEX=)
            ;;
        agent)
            [[ -n $base ]] && args+=(--build-arg "BASE_IMAGE=$base")
            # The workload of the same tag is the one it starts.
            args+=(--build-arg "WORKLOAD_IMAGE=gpubench-workload:$tag")
            ;;
        *)
            [[ -n $base ]] && args+=(--build-arg "BASE_IMAGE=$base")
            ;;
    esac
    log=$(mktemp)
    start=$(date +%s)
    if ! DOCKER_BUILDKIT=1 $DOCKER build "${args[@]}" -f "$dockerfile" -t "$image" . >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "build: $image failed (full log: $log)" >&2
        # BuildKit's words for a base image it could not fetch from its registry.
        if [[ -z $local_base && -z $base ]] && grep -qE "$UNPULLED" "$log"; then
            echo "build: its public base image could not be pulled (no registry reachable?):" \
                 "make -C docker LOCAL_BASE=1 (docker/build.sh --local-base) builds FROM a" \
                 "local Debian base made with debootstrap instead" >&2
        fi
        exit 1
    fi
    rm -f "$log"
    size=$($DOCKER image inspect --format '{{.Size}}' "$image")
    echo "build: $image ($version) in $(( $(date +%s) - start )) s, $(( size / 1000000 )) MB" >&2
done
