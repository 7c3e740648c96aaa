#!/usr/bin/env bash
# make bench: hit-path throughput of shield against the bare demo origin,
# measured in the same run with wrk, in interleaved rounds (origin, shield,
# origin, shield, ...), medians reported with their ratio. Machines here
# are noisy: the ratio is the figure to compare, not absolute req/s.
#
# Env: ROUNDS (3), DURATION (5s), CONNS (64), THREADS (2), SIZE (1024).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3} duration=${DURATION:-5s} conns=${CONNS:-64} threads=${THREADS:-2} size=${SIZE:-1024}
# free_port picks a random unused loopback port (bash's /dev/tcp: a port
# that accepts a connection is taken).
free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 20000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
	done
	echo "no free port" >&2; exit 1
}
origin_port=${ORIGIN_PORT:-$(free_port)} shield_port=${SHIELD_PORT:-$(free_port)} admin_port=${ADMIN_PORT:-$(free_port)}

if ! command -v wrk >/dev/null; then
	echo "installing wrk"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi

tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

cat >"$tmp/shield.yaml" <<YAML
listen: 127.0.0.1:$shield_port
admin: { listen: 127.0.0.1:$admin_port }
log: { level: warn }
cache: { size: 64MiB }
origins:
  demo: { servers: [127.0.0.1:$origin_port], timeout: 5s }
routes:
  - { name: demo, hosts: ["*"], path_prefix: /, origin: demo }
YAML

bin/demo-origin -listen 127.0.0.1:$origin_port 2>"$tmp/origin.log" & pids+=($!)
bin/shield -config "$tmp/shield.yaml" 2>"$tmp/shield.log" & pids+=($!)
wait_up() { for _ in $(seq 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done; echo "not up: $1"; exit 1; }
wait_up "http://127.0.0.1:$origin_port/__origin/stats"
wait_up "http://127.0.0.1:$admin_port/readyz"

path="/bench/object?size=$size&cc=public,%20max-age=3600"
curl -fsS -o /dev/null "http://127.0.0.1:$shield_port$path"
status=$(curl -fsS -D - -o /dev/null "http://127.0.0.1:$shield_port$path" | tr -d '\r' | grep -i '^cache-status:' || true)
echo "warm: $status"
case "$status" in *"; hit"*) ;; *) echo "shield did not serve a HIT"; exit 1 ;; esac

run_wrk() { # url → req/s
	wrk -t"$threads" -c"$conns" -d"$duration" --latency "$1" >"$tmp/wrk.out"
	awk '/^Requests\/sec:/ {print $2}' "$tmp/wrk.out"
	grep -E '^\s+99%' "$tmp/wrk.out" | awk '{print $2}' >"$tmp/p99"
}
origin_rps=() shield_rps=() origin_p99=() shield_p99=()
for r in $(seq "$rounds"); do
	origin_rps+=("$(run_wrk "http://127.0.0.1:$origin_port$path")"); origin_p99+=("$(cat "$tmp/p99")")
	shield_rps+=("$(run_wrk "http://127.0.0.1:$shield_port$path")"); shield_p99+=("$(cat "$tmp/p99")")
	echo "round $r: origin ${origin_rps[-1]} req/s (p99 ${origin_p99[-1]}), shield ${shield_rps[-1]} req/s (p99 ${shield_p99[-1]})"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mo=$(median "${origin_rps[@]}") ms=$(median "${shield_rps[@]}")
echo
echo "| target | median req/s | rounds |"
echo "|---|---|---|"
echo "| bare demo origin (net/http) | $mo | ${origin_rps[*]} |"
echo "| shield, 1 KiB hit | $ms | ${shield_rps[*]} |"
awk -v s="$ms" -v o="$mo" 'BEGIN { printf "\nshield/origin ratio: %.2f  (%s, nproc %s, wrk -t%s -c%s -d%s, %s rounds)\n", s/o, strftime("%Y-%m-%d"), '"$(nproc)"', '"$threads"', '"$conns"', "'"$duration"'", '"$rounds"' }'
