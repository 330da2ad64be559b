#!/usr/bin/env bash
# Install and start what buildkit's tests need on a Debian 12 machine, as root:
#   Docker Engine 26.1, buildx 0.13 and the CNCF distribution registry (Debian 13 packages),
#   debootstrap, skopeo-free tooling, and a dockerd running with the containerd image store;
#   binutils-aarch64-linux-gnu, whose objdump reads the code of the arm64 images built here.
# Idempotent: a second run only checks that dockerd answers.
#
# The Debian 13 ("trixie") packages come from the machine's own apt source with only the
# suite changed; no mirror host name is written into this repository.
set -euo pipefail

log() { printf 'install-engine: %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
  log "must run as root (it installs packages and starts dockerd)"; exit 1
fi

DOCKER_DATA_ROOT=${LLAMA_BUILDKIT_DOCKER_DATA_ROOT:-/var/lib/docker}
DOCKERD_LOG=${LLAMA_BUILDKIT_DOCKERD_LOG:-/var/log/buildkit-dockerd.log}

add_trixie_source() {
  local src=/etc/apt/sources.list.d/debian.sources
  local dst=/etc/apt/sources.list.d/buildkit-trixie.sources
  [ -f "$dst" ] && return 0
  if [ ! -f "$src" ]; then
    log "no $src on this machine: cannot derive a Debian 13 source"; exit 1
  fi
  # First stanza only (the main archive, not -security), suite changed to trixie.
  awk 'BEGIN{RS=""; ORS="\n\n"} NR==1' "$src" \
    | sed -E 's/^Suites:.*/Suites: trixie/' >"$dst"
  # Keep bookworm the default: trixie packages only where asked for by name.
  cat >/etc/apt/preferences.d/buildkit-trixie <<'EOF'
Package: *
Pin: release n=trixie
Pin-Priority: 100
EOF
}

install_packages() {
  if command -v dockerd >/dev/null && docker buildx version >/dev/null 2>&1 \
     && command -v docker-registry >/dev/null && command -v debootstrap >/dev/null \
     && command -v aarch64-linux-gnu-objdump >/dev/null; then
    return 0
  fi
  add_trixie_source
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends \
    docker.io/trixie docker-buildx/trixie docker-registry/trixie \
    debootstrap apache2-utils openssl iptables ca-certificates git busybox-static \
    binutils-aarch64-linux-gnu \
    >/dev/null
}

start_dockerd() {
  if docker info >/dev/null 2>&1; then
    log "dockerd already answers"; return 0
  fi
  mkdir -p /etc/docker
  # BuildKit's cache is collected past 10 GB, least recently used first: the tests' clean rebuilds (`reproduce`
  # runs with --no-cache) each leave another 0.7-1 GB apt layer that nothing uses again, and CI machines have
  # had 7 GB free. Without a limit the engine tier's cache grew to 15 GB. One rule: moby's default rules
  # (defaultKeepStorage alone) keep only 1.4 GB of cache mounts and contexts, which would empty the ccache
  # mount and the CUDA contexts that the tests' second builds count on.
  if [ -f /etc/docker/daemon.json ] && ! grep -q keepStorage /etc/docker/daemon.json; then
    log "/etc/docker/daemon.json is yours and left as it is; the tests' engine also sets builder.gc (see this script)"
  fi
  if [ ! -f /etc/docker/daemon.json ]; then
    cat >/etc/docker/daemon.json <<'EOF'
{
  "features": {"containerd-snapshotter": true},
  "builder": {"gc": {"enabled": true, "policy": [{"keepStorage": "10GB", "all": true}]}}
}
EOF
  fi
  # The distribution's docker CLI may be shadowed by another one on PATH: both talk to the same socket.
  log "starting dockerd (log: $DOCKERD_LOG)"
  nohup /usr/sbin/dockerd --data-root "$DOCKER_DATA_ROOT" >>"$DOCKERD_LOG" 2>&1 &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && { log "dockerd is up"; return 0; }
    sleep 1
  done
  log "dockerd did not start; last lines of its log:"; tail -n 30 "$DOCKERD_LOG" >&2; exit 1
}

install_packages
start_dockerd
docker version --format 'install-engine: engine {{.Server.Version}}' >&2
docker buildx version >&2
