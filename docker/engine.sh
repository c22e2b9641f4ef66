#!/usr/bin/env bash
# Make sure a docker engine is installed and running on this machine (Debian, as root).
#
# Installs docker.io, debootstrap and docker-compose from Debian when they are missing,
# starts dockerd in the background when `docker info` fails, and waits for it.
# Idempotent: a second call on a machine with a running engine returns at once.
# Exit codes: 0 running, 77 not root (cannot install or start it), 78 apt-get could not
# install the packages, 1 dockerd did not come up.
#
# Uses Debian's client /usr/bin/docker: it has BuildKit built in, whereas a client found
# elsewhere on PATH (e.g. /usr/local/bin/docker) may want a buildx plugin that is absent.
set -euo pipefail

DOCKER=/usr/bin/docker
LOG=${GPUBENCH_DOCKERD_LOG:-/var/log/gpubench-dockerd.log}
WAIT_S=${GPUBENCH_DOCKERD_WAIT_S:-60}

say() { echo "engine: $*" >&2; }

missing=()
[[ -x $DOCKER && -x /usr/sbin/dockerd ]] || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v docker-compose >/dev/null || missing+=(docker-compose)
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        say "not root: cannot install ${missing[*]}"
        exit 77
    fi
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get -o DPkg::Lock::Timeout=600 update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
        say "cannot install ${missing[*]} with apt-get"
        exit 78
    fi
fi

if $DOCKER info >/dev/null 2>&1; then
    say "running ($($DOCKER version --format '{{.Server.Version}}'))"
    exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
    say "not root: cannot start dockerd"
    exit 77
fi
say "starting dockerd (log: $LOG)"
# setsid: the engine must outlive this script and the test that called it.
setsid /usr/sbin/dockerd >"$LOG" 2>&1 < /dev/null &
for ((i = 0; i < WAIT_S * 2; i++)); do
    if $DOCKER info >/dev/null 2>&1; then
        say "running ($($DOCKER version --format '{{.Server.Version}}')) after $((i / 2)) s"
        exit 0
    fi
    sleep 0.5
done
say "dockerd did not answer within ${WAIT_S} s; last lines of $LOG:"
tail -n 20 "$LOG" >&2 || true
exit 1
