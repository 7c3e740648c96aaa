#!/usr/bin/env bash
# Starts the demo origin in the background and shield in the foreground
# with config.example.yaml. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
bin/demo-origin -listen 127.0.0.1:9000 &
origin=$!
trap 'kill $origin 2>/dev/null || true' EXIT
for _ in $(seq 50); do
	curl -fsS -o /dev/null http://127.0.0.1:9000/__origin/stats 2>/dev/null && break
	sleep 0.1
done
echo "demo origin on 127.0.0.1:9000; shield on 127.0.0.1:8080 (admin 127.0.0.1:9091)"
echo "try: curl -i http://127.0.0.1:8080/hello   (twice: MISS, then HIT)"
bin/shield -config config.example.yaml
