#!/usr/bin/env bash
# bench/profile.sh: a CPU profile of shield's hit path under wrk load.
# Starts the bench origin and bench/profile (the proxy served as
# cmd/shield serves it, plus net/http/pprof), warms one object, runs wrk
# -t2 -c64 against it and takes a SECONDS-long CPU profile in the middle.
# Writes bench/results/tmp/<name>.pprof and prints `go tool pprof -top`.
#
# Usage: bench/profile.sh [hit1k|hit100k|keys10k|fwd|h2]   (default hit1k)
# h2: the 1 KiB hit over cleartext HTTP/2 (server.h2c), h2load -t2 -c10
# -m100 instead of wrk, as make bench-peers' h2 row.
# fwd: three static cluster nodes (bench/profile is the edge n1, two plain
# shields the others); wrk cycles ~500 keys owned by n2/n3, each far below
# hot_key_rate, so every request is forwarded: the edge's forwarding cost.
# Env: SECONDS_PROFILED (10), PORT_BASE (19300), TOP (35).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-hit1k} secs=${SECONDS_PROFILED:-10} base=${PORT_BASE:-19300}
origin_port=$base shield_port=$((base + 1)) pprof_port=$((base + 2))
command -v wrk >/dev/null || { echo "wrk missing: run make bench-peers once (it installs it)"; exit 1; }
go build -o bin/bench-origin ./bench/origin
go build -o bin/bench-client ./bench/client
go build -o bin/bench-profile ./bench/profile
go build -o bin/shield ./cmd/shield # fwd: the other two nodes

tmp=$(mktemp -d)
pids=()
die() { echo "$*" >&2; exit 1; }
. bench/lib.sh
cleanup() {
	trap - EXIT INT TERM
	stop_all "${pids[@]}"
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

shield_yaml() { # listen admin [cluster yaml]
	cat <<YAML
listen: $1
admin: { listen: $2 }
log: { level: warn }
cache: { size: 256MiB, max_object_size: 1MiB }
origins:
  bench: { servers: ["127.0.0.1:$origin_port"], timeout: 5s }
routes:
  - name: bench
    hosts: ["*"]
    path_prefix: /
    origin: bench
    cache: { stale_while_revalidate: 10s, stale_if_error: 1h, max_stale: 1h }
${3:-}
YAML
}
node_yaml() { # i
	local peers="" j
	for j in 1 2 3; do peers+="    - { id: n$j, addr: 127.0.0.1:$((base + 20 + j)) }"$'\n'; done
	shield_yaml 127.0.0.1:$((base + 10 + $1)) 127.0.0.1:$((base + 15 + $1)) "cluster:
  node_id: n$1
  listen: 127.0.0.1:$((base + 20 + $1))
  secret: bench-secret-not-for-production
  membership: static
  peers:
$peers"
}
bin/bench-origin -listen 127.0.0.1:$origin_port 2>"$tmp/origin.log" & pids+=($!)
if [ "$what" = fwd ]; then
	node_yaml 1 >"$tmp/shield.yaml"
	shield_port=$((base + 11))
	for i in 2 3; do
		node_yaml $i >"$tmp/node$i.yaml"
		bin/shield -config "$tmp/node$i.yaml" 2>"$tmp/node$i.log" & pids+=($!)
	done
elif [ "$what" = h2 ]; then
	command -v h2load >/dev/null || { echo "h2load missing: run make bench-peers once (it installs it)"; exit 1; }
	shield_yaml 127.0.0.1:$shield_port 127.0.0.1:$((base + 3)) "server: { h2c: true }" >"$tmp/shield.yaml"
else
	shield_yaml 127.0.0.1:$shield_port 127.0.0.1:$((base + 3)) >"$tmp/shield.yaml"
fi
bin/bench-profile -config "$tmp/shield.yaml" -pprof 127.0.0.1:$pprof_port 2>"$tmp/shield.log" & pids+=($!)
wait_http "http://127.0.0.1:$origin_port/__origin/stats"
wait_http "http://127.0.0.1:$pprof_port/debug/pprof/"
[ "$what" = fwd ] && for i in 2 3; do wait_http "http://127.0.0.1:$((base + 15 + i))/readyz"; done

url=http://127.0.0.1:$shield_port
wrkargs=(-t2 -c64 -d$((secs + 4))s --latency)
case $what in
hit1k | h2) path="/obj/1k?size=1024"; curl -fsS -o /dev/null "$url$path" ;;
hit100k) path="/obj/100k?size=102400"; curl -fsS -o /dev/null "$url$path" ;;
keys10k)
	path=/
	bin/bench-client warm -url "$url/k/%d?size=1024" -keys 10000 -c 32
	wrkargs+=(-s bench/keys.lua)
	;;
fwd)
	path=/
	bin/bench-client classify -url "$url/c/%d?size=1024" -keys 1500 \
		-metrics "http://127.0.0.1:$((base + 16))/metrics" -local "$tmp/local.paths" -forwarded "$tmp/fwd.paths"
	head -n 500 "$tmp/fwd.paths" >"$tmp/fwdN.paths"
	export BENCH_PATHS=$tmp/fwdN.paths
	wrkargs+=(-s bench/keys.lua)
	;;
*) echo "usage: $0 [hit1k|hit100k|keys10k|fwd|h2]"; exit 2 ;;
esac

mkdir -p bench/results/tmp
out=bench/results/tmp/$what.pprof
if [ "$what" = h2 ]; then
	h2load -t2 -c10 -m100 -D $((secs + 4)) "$url$path" >"$tmp/wrk.out" 2>&1 &
else
	wrk "${wrkargs[@]}" "$url$path" >"$tmp/wrk.out" &
fi
wrkpid=$!
pids+=($wrkpid)
sleep 2
curl -fsS -m $((secs + 10)) -o "$out" "http://127.0.0.1:$pprof_port/debug/pprof/profile?seconds=$secs"
wait $wrkpid || true
grep -E 'Requests/sec|99%|^finished in|^requests:' "$tmp/wrk.out"
echo "profile: $out (go tool pprof -http=: bin/bench-profile $out)"
go tool pprof -top -nodecount="${TOP:-35}" bin/bench-profile "$out" 2>/dev/null
