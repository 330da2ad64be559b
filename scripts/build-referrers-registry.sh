#!/usr/bin/env bash
# Build the signing tests' registry with the OCI 1.1 referrers API (scripts/referrers-registry/main.go:
# go-containerregistry's pkg/registry) offline: the source from Debian trixie's package
# golang-github-google-go-containerregistry-dev 0.20.1 (apt-get download + dpkg -x, no other package),
# compiled by bookworm's golang-1.19-go in GOPATH mode (no module is fetched). Prints the binary's path:
#   "$(bash scripts/build-referrers-registry.sh [PREFIX])" -addr 127.0.0.1:PORT [-oci-subject]
# Built once per main.go (its hash names the binary). Needs the trixie apt source that
# scripts/install-engine.sh adds; installs golang-1.19-go when missing (root).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PREFIX=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/llama-buildkit-tools/referrers-registry}
PACKAGE=golang-github-google-go-containerregistry-dev
VERSION=0.20.1+ds1-1
GO=/usr/lib/go-1.19/bin/go
STAMP=$( (echo "$VERSION"; cat "$HERE/referrers-registry/main.go") | sha256sum | cut -c1-16)
BIN="$PREFIX/registry-$STAMP"
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
if [ ! -x "$GO" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-1.19-go >&2
  else
    echo "build-referrers-registry: $GO is needed: apt-get install golang-1.19-go" >&2
    exit 1
  fi
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
chmod 755 "$WORK"  # apt-get download fetches as the _apt user where it can
(cd "$WORK" && apt-get download -qq "$PACKAGE=$VERSION" 2>/dev/null) || {
  echo "build-referrers-registry: apt-get download $PACKAGE=$VERSION failed (is the trixie source of" \
       "scripts/install-engine.sh there? run apt-get update)" >&2
  exit 1
}
dpkg -x "$WORK"/"${PACKAGE}"_*.deb "$WORK/deb"
mkdir -p "$WORK/gopath/src/referrers-registry" "$PREFIX"
ln -s "$WORK/deb/usr/share/gocode/src/github.com" "$WORK/gopath/src/github.com"
cp "$HERE/referrers-registry/main.go" "$WORK/gopath/src/referrers-registry/"
(cd "$WORK/gopath/src/referrers-registry" && GOPATH="$WORK/gopath" GO111MODULE=off GOFLAGS= GOPROXY=off \
   GOCACHE="$WORK/cache" "$GO" build -o "$WORK/registry" .)
mv "$WORK/registry" "$BIN"
echo "$BIN"
