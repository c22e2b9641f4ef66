#!/usr/bin/env bash
# Starts a carried docker engine on a GPU machine that has none and reaches no registry,
# and makes a base image from the machine's own Python with its CUDA PyTorch.
#
#   bash bench/h200_engine_up.sh ENGINE.tar.xz [BASE_TAG]     (BASE_TAG default gpu-local-base:1)
#
# ENGINE.tar.xz holds Debian's docker.io 20.10, containerd, runc and libdevmapper, unpacked
# at / (the root of the machine): usr/sbin/{dockerd,runc}, usr/bin/{containerd,
# containerd-shim-runc-v2,docker}, opt/gpu-docker/lib/libdevmapper.so.1.02.1.
# The engine runs with --iptables=false --bridge=none: containers use --network host.
# There is no NVIDIA Container Toolkit: a container sees the GPUs through the device nodes
# and the driver's folder (docker/README.md, "A host without the toolkit").
#
# The base image is the machine's root file system without the driver (mounted at run
# time, as the toolkit would) and without CUDA's own toolkit (PyTorch's wheels carry the
# CUDA libraries they use); its PATH puts the machine's Python with CUDA PyTorch
# (/opt/torch/.venv/bin) first, so that the images' `python3` is that one.
set -uo pipefail
pack=${1:?usage: h200_engine_up.sh ENGINE.tar.xz [BASE_TAG]}
tag=${2:-gpu-local-base:1}
tar -C / -xJf "$pack" || exit 1
lib=/opt/gpu-docker/lib
mkdir -p /var/lib/docker /run/docker
# setsid: the engine outlives this command for the rest of the call's script.
LD_LIBRARY_PATH=$lib setsid containerd >/tmp/containerd.log 2>&1 < /dev/null &
sleep 1
LD_LIBRARY_PATH=$lib setsid dockerd --iptables=false --ip6tables=false --bridge=none \
  --containerd=/run/containerd/containerd.sock >/tmp/dockerd.log 2>&1 < /dev/null &
for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
docker info >/dev/null 2>&1 || { echo "dockerd did not start:"; tail -5 /tmp/dockerd.log; exit 1; }
docker info --format 'docker {{.ServerVersion}}, {{.Driver}}, cgroup v{{.CgroupVersion}}'
if ! docker image inspect "$tag" >/dev/null 2>&1; then
  start=$(date +%s)
  tar -C / -c --exclude=usr/share/doc --exclude=usr/share/man --exclude=usr/local/nvidia \
    --exclude='usr/local/cuda*' --exclude=opt/nvidia \
    bin sbin lib lib64 usr etc opt/torch 2>/dev/null \
    | docker import \
        --change 'ENV PATH=/opt/torch/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        - "$tag" >/dev/null || exit 1
  echo "base image $tag from this machine's root file system in $(( $(date +%s) - start )) s"
fi
# What a container needs to see the GPUs without the toolkit:
devs=""; for d in /dev/nvidia*; do [ -c "$d" ] && devs="$devs --device $d"; done
echo "GPU_DOCKER_ARGS=\"$devs -v /usr/local/nvidia:/usr/local/nvidia:ro -e LD_LIBRARY_PATH=/usr/local/nvidia/lib64\""
