#!/usr/bin/env bash
# Builds the Consul agent used by cluster tests into $1 (once per machine),
# from the pinned tools module in ../shared/consul (see its README).
set -euo pipefail
dest=${1:?destination path}
cd "$(dirname "$0")/.."
src=${CONSUL_SRC:-../shared/consul}
mkdir -p "$(dirname "$dest")"
echo "building consul into $dest (first time on this machine: several minutes)"
(cd "$src" && go build -trimpath -ldflags='-s -w' -o "$dest.tmp" github.com/hashicorp/consul)
mv "$dest.tmp" "$dest"
