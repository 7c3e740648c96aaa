#!/usr/bin/env bash
# Builds the Consul agent used by cluster tests into $1, once per machine.
# tools/consul is a tools module (its own go.mod and
# go.sum) pinning Consul v1.14.11, the newest MPL-2.0 line that builds from
# the Go module proxy; the build is reproducible and needs no network
# beyond the module proxy. First build on 2 cores: about 5–10 minutes.
set -euo pipefail
dest=${1:?destination path}
cd "$(dirname "$0")/.."
src=${CONSUL_SRC:-tools/consul}
mkdir -p "$(dirname "$dest")"
echo "building consul into $dest (first time on this machine: several minutes)"
(cd "$src" && go build -trimpath -ldflags='-s -w' -o "$dest.tmp" github.com/hashicorp/consul)
mv "$dest.tmp" "$dest"
"$dest" version | head -1
