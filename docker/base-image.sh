#!/usr/bin/env bash
# Make the local base image that stands in for python:3.11-slim where no registry is reachable.
#
#   docker/base-image.sh            -> prints the image name (e.g. gpubench-base:bookworm-1a2b3c4d)
#
# Debian bookworm (minbase) with python3 (3.11), python3-venv, python3-pip and
# ca-certificates, made with debootstrap and `docker import`. Cached twice:
#   - the image itself: when it exists, nothing is done;
#   - the root file system as a tarball under $GPUBENCH_CACHE (default /var/cache/gpubench),
#     so that a machine whose engine lost its images re-imports in seconds.
# The tag carries a hash of the recipe, so changing the package list makes a new image.
set -euo pipefail

DOCKER=/usr/bin/docker
SUITE=${GPUBENCH_BASE_SUITE:-bookworm}
MIRROR=${GPUBENCH_BASE_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3,python3-venv,python3-pip,ca-certificates
CACHE=${GPUBENCH_CACHE:-/var/cache/gpubench}

say() { echo "base-image: $*" >&2; }

recipe="$SUITE $MIRROR $PACKAGES minbase slim v2"
tag="$SUITE-$(printf '%s' "$recipe" | sha256sum | cut -c1-8)"
image="gpubench-base:$tag"
tarball="$CACHE/rootfs-$tag.tar"

if $DOCKER image inspect "$image" >/dev/null 2>&1; then
    say "$image exists"
    echo "$image"
    exit 0
fi

mkdir -p "$CACHE"
if [[ ! -s $tarball ]]; then
    command -v debootstrap >/dev/null || { say "debootstrap is not installed (docker/engine.sh installs it)"; exit 1; }
    rootfs=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    trap 'rm -rf "$rootfs"' EXIT
    say "debootstrap $SUITE ($PACKAGES) into $rootfs"
    start=$(date +%s)
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
        || { tail -n 20 "$CACHE/debootstrap.log" >&2; exit 1; }
    # Downloaded packages and package lists are not part of an image; nor are manuals and
    # translations (as in Debian's slim images; the copyright files stay).
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
    rm -rf "$rootfs"/usr/share/locale/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
    find "$rootfs"/usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete
    tar -C "$rootfs" --numeric-owner -cf "$tarball.part" .
    mv "$tarball.part" "$tarball"
    # Root file systems of older recipes are of no further use.
    find "$CACHE" -maxdepth 1 -name "rootfs-$SUITE-*.tar" -not -name "${tarball##*/}" -delete
    say "root file system made in $(( $(date +%s) - start )) s: $tarball ($(du -h "$tarball" | cut -f1))"
fi

say "importing $tarball as $image"
$DOCKER import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --message "debootstrap --variant=minbase --include=$PACKAGES $SUITE" \
    "$tarball" "$image" >/dev/null
echo "$image"
