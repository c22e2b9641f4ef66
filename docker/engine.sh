#!/usr/bin/env bash
# Make sure a docker engine is running on this machine (Debian or Ubuntu, as root).
#
# First asks `docker info`: an engine that answers is used as it is, whoever installed it
# (Docker CE on GitHub's ubuntu-24.04 runners: /usr/bin/dockerd, containerd.io; Debian's
# docker.io elsewhere) and no docker package is installed beside it (Debian's docker.io
# conflicts with containerd.io). An engine that is installed but stopped is started;
# Debian's docker.io is installed only where there is no dockerd at all. Then the tools
# the tests need, each only where missing: debootstrap and Debian's archive keys (the local
# base image), and docker-compose where the client has no `docker compose` (Compose v2).
# Idempotent: a second call on a machine with a running engine returns at once.
# Exit codes: 0 running, 77 not root (cannot install or start it), 78 apt-get could not
# install the packages, 1 dockerd did not come up.
#
# The client: $DOCKER if set, else Debian's /usr/bin/docker where it is Debian's (BuildKit
# built in; a newer client elsewhere on PATH may want a buildx plugin that is absent),
# else the `docker` on PATH.
set -euo pipefail

LOG=${GPUBENCH_DOCKERD_LOG:-/var/log/gpubench-dockerd.log}
WAIT_S=${GPUBENCH_DOCKERD_WAIT_S:-60}

say() { echo "engine: $*" >&2; }

client() {
    [[ -n ${DOCKER:-} ]] && { echo "$DOCKER"; return; }
    [[ -x /usr/bin/docker ]] && { echo /usr/bin/docker; return; }
    command -v docker || echo /usr/bin/docker
}

# A dockerd installed here, wherever its package put it (docker.io: /usr/sbin, Docker CE:
# /usr/bin); empty when none is.
installed_dockerd() {
    local found
    for found in /usr/sbin/dockerd /usr/bin/dockerd "$(command -v dockerd || true)"; do
        [[ -n $found && -x $found ]] && { echo "$found"; return 0; }
    done
    return 0
}

install() {  # install PACKAGE...: apt-get install, as root
    if [[ $(id -u) -ne 0 ]]; then
        say "not root: cannot install $*"
        exit 77
    fi
    say "installing $*"
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get -o DPkg::Lock::Timeout=600 update -qq \
           && apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" \
              >/dev/null; }; then
        say "cannot install $* with apt-get"
        exit 78
    fi
}

answers() { "$(client)" info >/dev/null 2>&1; }

tools() {  # what the tests need beside the engine, each only where missing
    local missing=()
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    # Ubuntu's debootstrap does not bring Debian's keys, which check the base's packages.
    [[ -e /usr/share/keyrings/debian-archive-keyring.gpg ]] || missing+=(debian-archive-keyring)
    if ! "$(client)" compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null; then
        missing+=(docker-compose)
    fi
    ((${#missing[@]} == 0)) || install "${missing[@]}"
}

if answers; then
    say "running ($("$(client)" version --format '{{.Server.Version}}'), $(client))"
    tools
    exit 0
fi

dockerd=$(installed_dockerd)
if [[ -z $dockerd ]]; then
    install docker.io
    dockerd=$(installed_dockerd)
fi
tools
if [[ $(id -u) -ne 0 ]]; then
    say "not root: cannot start $dockerd"
    exit 77
fi
say "starting $dockerd (log: $LOG)"
# setsid: the engine must outlive this script and the test that called it.
setsid "$dockerd" >"$LOG" 2>&1 < /dev/null &
for ((i = 0; i < WAIT_S * 2; i++)); do
    if answers; then
        say "running ($("$(client)" version --format '{{.Server.Version}}')) after $((i / 2)) s"
        exit 0
    fi
    sleep 0.5
done
say "dockerd did not answer within ${WAIT_S} s; last lines of $LOG:"
tail -n 20 "$LOG" >&2 || true
exit 1
