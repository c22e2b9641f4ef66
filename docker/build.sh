#!/usr/bin/env bash
# Build the three images: gpubench-agent, gpubench-workload and gpubench-collector.
#
#   docker/build.sh [--local-base] [--tag TAG] [agent|workload|collector ...]
#
#   --local-base  build FROM the local base image (docker/base-image.sh makes it; for
#                 machines with no registry) and install tensorflow-cpu in the workload
#                 image; otherwise FROM the public images named in each Dockerfile.
#   --tag TAG     image tag (default: latest).
#
# Environment: GPUBENCH_TF_PACKAGE (the workload's TensorFlow on a base without one;
# default with --local-base: tensorflow-cpu==2.21.0), GPUBENCH_PIP_CERT (a CA bundle handed
# to pip inside the builds as a BuildKit secret; default: the system's bundle if present),
# DOCKER (the docker client; default: /usr/bin/docker if present, else docker on PATH).
# A build that cannot pull its public base image says to use --local-base.
# Prints how long each image took. Uses Debian's client at /usr/bin/docker when present:
# BuildKit is built into it (a newer client elsewhere on PATH may want a buildx plugin).
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKER=${DOCKER:-/usr/bin/docker}
[[ -x $DOCKER ]] || DOCKER=docker
tag=latest
local_base=
images=()
while (($#)); do
    case $1 in
        --local-base) local_base=1 ;;
        --tag) tag=$2; shift ;;
        agent | workload | collector) images+=("$1") ;;
        -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
((${#images[@]})) || images=(agent workload collector)

UNPULLED='load metadata for|failed to (do request|resolve|authorize|fetch)|pull access denied|dial tcp|no such host|i/o timeout|TLS handshake timeout'

common=(--progress=plain)
cert=${GPUBENCH_PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
[[ -s $cert ]] && common+=(--secret "id=pipcert,src=$cert")
tf_package=${GPUBENCH_TF_PACKAGE:-}
if [[ -n $local_base ]]; then
    base=$(docker/base-image.sh)
    common+=(--build-arg "BASE_IMAGE=$base")
    tf_package=${tf_package:-tensorflow-cpu==2.21.0}
fi

for name in "${images[@]}"; do
    args=("${common[@]}")
    [[ $name == workload && -n $tf_package ]] && args+=(--build-arg "TF_PACKAGE=$tf_package")
    log=$(mktemp)
    start=$(date +%s)
    if ! DOCKER_BUILDKIT=1 $DOCKER build "${args[@]}" -f "docker/$name.Dockerfile" \
        -t "gpubench-$name:$tag" . >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "build: gpubench-$name:$tag failed (full log: $log)" >&2
        # BuildKit's words for a base image it could not fetch from its registry.
        if [[ -z $local_base ]] && grep -qE "$UNPULLED" "$log"; then
            echo "build: its public base image could not be pulled (no registry reachable?):" \
                 "make -C docker LOCAL_BASE=1 (docker/build.sh --local-base) builds FROM a" \
                 "local Debian base made with debootstrap instead" >&2
        fi
        exit 1
    fi
    rm -f "$log"
    size=$($DOCKER image inspect --format '{{.Size}}' "gpubench-$name:$tag")
    echo "build: gpubench-$name:$tag in $(( $(date +%s) - start )) s, $(( size / 1000000 )) MB" >&2
done
