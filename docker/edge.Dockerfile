# The collector's public edge: Debian's HAProxy with docker/edge/haproxy.cfg (TLS, HTTP/2
# to gRPC, connections per client address, timeouts, x-forwarded-for). docker/compose.yaml
# runs it under the profile "edge"; docker/README.md says how and why HAProxy.
#
#   docker build -f docker/edge.Dockerfile -t gpubench-edge .
#   docker run -v "$PWD/edge.pem:/etc/haproxy/certs/edge.pem:ro" -p 50443:50443 \
#       -p 443:8443 gpubench-edge
#
# Where no registry is reachable, build FROM the local Debian base (docker/build.sh
# --local-base): only Debian's own packages are installed.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
# Debian's haproxy of the base's release: its security updates come with a rebuild, which
# a pinned version would refuse.
# hadolint ignore=DL3008
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends haproxy \
    && rm -rf /var/lib/apt/lists/* \
    && haproxy -v
COPY docker/edge/haproxy.cfg /etc/haproxy/haproxy.cfg
# The certificate and its key in one PEM, mounted here (docker/compose.yaml).
RUN mkdir -p /etc/haproxy/certs
# HAProxy starts as root (to read the mounted key, which need not be readable by anyone
# else) and drops to the user haproxy before serving (EDGE_USER: the file's `user`).
ENV EDGE_USER=haproxy
EXPOSE 50443 8443
# SIGUSR1: stop taking connections, let those open finish (HAProxy's soft stop).
STOPSIGNAL SIGUSR1
ENTRYPOINT ["haproxy", "-db", "-f", "/etc/haproxy/haproxy.cfg"]
# What the image is, in the OCI's words (docker/build.sh passes the version, the commit,
# the time of the build and the source repository).
ARG GPUBENCH_VERSION=0.0
ARG GPUBENCH_REVISION=
ARG GPUBENCH_CREATED=
ARG GPUBENCH_SOURCE=
LABEL org.opencontainers.image.title="gpubench-edge" \
      org.opencontainers.image.description="The gpubench collector's public edge: HAProxy with TLS, connections per client address and timeouts in front of gRPC and the results site" \
      org.opencontainers.image.version="${GPUBENCH_VERSION}" \
      org.opencontainers.image.revision="${GPUBENCH_REVISION}" \
      org.opencontainers.image.created="${GPUBENCH_CREATED}" \
      org.opencontainers.image.source="${GPUBENCH_SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
