#!/usr/bin/env bash
# bench/economics.sh (make bench-economics; bench/peers.sh runs it too):
# what sharding buys. The same request stream — Zipf (s=ECON_S) over
# ECON_KEYS keys, object sizes a truncated Pareto between 1 KiB and
# 256 KiB (median ~1.8 KiB, mean ~4.4 KiB, p99 ~48 KiB), origin latency
# ECON_DELAY ms — is sent by bench-client zipf, round-robin over three
# nodes, to
#   - a 3-node shield cluster (static membership: each node forwards the
#     keys it does not own to their owner),
#   - three independent nginx,
#   - three independent Varnish,
# with the same cache memory per node (ECON_MEM, a list: one table row
# group per size) for every system: shield cache.size, nginx max_size
# (tmpfs), Varnish -s malloc (nuke_limit raised to 1000 so a large object
# may evict many small ones instead of failing with 503; failed requests
# of the peers are counted and reported, shield's fail the run). Every run starts fresh instances and a
# fresh path prefix. Reported per run: hit ratio (1 - origin requests /
# requests), origin requests against the floor (one per distinct key of
# the stream), origin requests/s, p50/p99 seen by the client, CPU µs per
# request of the three instances together (from /proc/PID/stat), wall time.
#
# Env: ECON_KEYS (1000000), ECON_REQUESTS (200000), ECON_S (1.0),
# ECON_MEM ("48 128 384", MiB per node), ECON_CONNS (128), ECON_DELAY (20),
# ECON_SYSTEMS ("shield shield-solo nginx varnish"; shield-solo is three
# independent shields, no cluster section: a node's cost without the
# forwarding hop, against the same stream, so the cluster's excess over
# it is what the hop costs — its own table), ECON_PORT_BASE (19200: uses
# +0..+39), ECON_OUT (file the markdown section is written to; default
# stdout), MAX_SECONDS (1500: watchdog), ECON_KEEP (set: keep the temp
# directory with logs and each shield node's /metrics after its run). Everything it starts is killed by
# PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
keys=${ECON_KEYS:-1000000} nreq=${ECON_REQUESTS:-200000} zs=${ECON_S:-1.0}
mems=${ECON_MEM:-48 128 384} conns=${ECON_CONNS:-128} delay=${ECON_DELAY:-20}
systems=${ECON_SYSTEMS:-shield shield-solo nginx varnish} base=${ECON_PORT_BASE:-19200}
origin_port=$base
started=$(date +%s)
log() { printf '%s econ: %s\n' "$(date +%T)" "$*" >&2; }
for b in wrk nginx varnishd; do command -v $b >/dev/null || { log "FAIL: $b missing (make bench-peers installs it)"; exit 1; }; done
[ -x bin/shield ] || { log "FAIL: bin/shield missing: run make build"; exit 1; }
go build -o bin/bench-origin ./bench/origin
go build -o bin/bench-client ./bench/client
# The peers' own performance settings (bench/README.md).
. bench/peer-settings.sh

. bench/lib.sh
tmp=$(run_tmp econ)
chmod 755 "$tmp"
origin_pid="" run_pids=() watchdog=""
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	[ -n "$watchdog" ] && kill $(tree "$watchdog") 2>/dev/null
	stop_all "${run_pids[@]}" $origin_pid
	wait 2>/dev/null || true
	[ -n "${ECON_KEEP:-}" ] || rm -rf "$tmp"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
(sleep "${MAX_SECONDS:-1500}"; log "watchdog: run took too long"; kill -TERM $$) 2>/dev/null &
watchdog=$!
die() { log "FAIL: $*"; for f in "$tmp"/*.log "$tmp"/*/error.log; do [ -s "$f" ] && { echo "--- tail $f" >&2; tail -5 "$f" >&2; }; done; exit 1; }
clk=$(getconf CLK_TCK)

bin/bench-origin -listen 127.0.0.1:$origin_port 2>"$tmp/origin.log" &
origin_pid=$!
stats=http://127.0.0.1:$origin_port/__origin/stats
wait_http "$stats"
zargs=(-keys "$keys" -requests "$nreq" -s "$zs" -delay "$delay")
plan=$(bin/bench-client zipf -plan "${zargs[@]}")
log "stream: $plan"

node_port() { echo $((base + 10 * $1 + $2)); } # system-slot(1..3) instance(1..3)

start_shield() { # mem [solo]: solo starts three independent nodes (no cluster section)
	local peers="" i
	for i in 1 2 3; do peers+="    - { id: n$i, addr: 127.0.0.1:$(($(node_port 3 $i) + 3)) }"$'\n'; done
	for i in 1 2 3; do
		cat >"$tmp/node$i.yaml" <<YAML
listen: 127.0.0.1:$(node_port 1 $i)
admin: { listen: 127.0.0.1:$(node_port 2 $i) }
log: { level: warn }
cache: { size: ${1}MiB, max_object_size: 1MiB }
origins:
  bench: { servers: ["127.0.0.1:$origin_port"], timeout: 5s, max_concurrency: 1024 }
routes:
  - name: bench
    hosts: ["*"]
    path_prefix: /
    origin: bench
YAML
		[ "${2:-}" = solo ] || cat >>"$tmp/node$i.yaml" <<YAML
cluster:
  node_id: n$i
  listen: 127.0.0.1:$(($(node_port 3 $i) + 3))
  secret: bench-secret-not-for-production
  membership: static
  peers:
$peers
YAML
		bin/shield -config "$tmp/node$i.yaml" 2>"$tmp/node$i.log" &
		run_pids+=($!)
	done
	for i in 1 2 3; do wait_http "http://127.0.0.1:$(node_port 2 $i)/readyz"; done
}
start_shield-solo() { start_shield "$1" solo; } # mem
start_nginx() { # mem
	local i d user=""
	[ "$(id -u)" -eq 0 ] && user="user root;  # workers need the temp dir; bench only"
	for i in 1 2 3; do
		d=$tmp/nginx$i
		mkdir -p "$d"
		sed -e "s/@ORIGIN_PORT@/$origin_port/" -e "s/@PORT@/$(node_port 1 $i)/" -e "s|@DIR@|$d|g" \
			-e "s|@USER@|$user|" -e "s|@H2_LISTEN@||" -e "s/max_size=256m/max_size=${1}m/" -e "s/keys_zone=bench:64m/keys_zone=bench:32m/" \
			bench/nginx.conf.in >"$d/nginx.conf"
		grep -q "max_size=${1}m" "$d/nginx.conf" || die "nginx.conf.in: max_size not found"
		nginx -e "$d/error.log" -p "$d" -c "$d/nginx.conf" 2>>"$d/error.log" &
		run_pids+=($!)
	done
	for i in 1 2 3; do wait_http "http://127.0.0.1:$(node_port 1 $i)/"; done
}
start_varnish() { # mem
	local i
	sed "s/@ORIGIN_PORT@/$origin_port/" bench/varnish.vcl.in >"$tmp/bench.vcl"
	for i in 1 2 3; do
		# shellcheck disable=SC2046 # varnish_threads prints separate flags
		varnishd -F -a 127.0.0.1:$(node_port 1 $i) -T 127.0.0.1:$(node_port 2 $i) -f "$tmp/bench.vcl" \
			-s malloc,${1}m -p nuke_limit=1000 $(varnish_threads $(( (conns + 2) / 3 ))) \
			-n "$tmp/varnish$i" >"$tmp/varnish$i.log" 2>&1 &
		run_pids+=($!)
	done
	for i in 1 2 3; do wait_http "http://127.0.0.1:$(node_port 1 $i)/"; done
}

declare -A E=() # E[system,mem,field]
targets=$(node_port 1 1),$(node_port 1 2),$(node_port 1 3)
targets=127.0.0.1:${targets//,/,127.0.0.1:}
for mem in $mems; do
	for sys in $systems; do
		log "$sys, 3 nodes x ${mem} MiB"
		run_pids=()
		"start_$sys" "$mem"
		c0=$(cpu_ticks "${run_pids[@]}")
		# The peers' failed requests are counted and reported; shield's
		# fail the run.
		tol=$nreq
		[[ "$sys" == shield* ]] && tol=0
		line=$(bin/bench-client zipf "${zargs[@]}" -targets "$targets" -c "$conns" -stats "$stats" -max-errors "$tol" \
			-prefix "/z/$sys-$mem-$started") || die "zipf on $sys: $line"
		c1=$(cpu_ticks "${run_pids[@]}")
		[ -n "${ECON_KEEP:-}" ] && for i in 1 2 3; do curl -s "http://127.0.0.1:$(node_port 2 $i)/metrics" >"$tmp/metrics$sys$i.txt" 2>/dev/null; done; stop_all "${run_pids[@]}"
		wait "${run_pids[@]}" 2>/dev/null || true
		run_pids=()
		log "$sys ${mem} MiB: $line"
		for f in requests distinct distinct_mib origin_requests floor_ratio hit_ratio origin_rps rps wall_s p50_ms p99_ms errors; do
			E[$sys,$mem,$f]=$(sed -n "s/.*\b$f=\([0-9.]*\).*/\1/p" <<<"$line")
		done
		E[$sys,$mem,cpu]=$(awk -v c=$((c1 - c0)) -v n="${E[$sys,$mem,requests]}" -v hz="$clk" 'BEGIN { printf "%.1f", c / hz * 1e6 / n }')
	done
done

{
	any=${systems%% *} first=${mems%% *}
	echo "### Cluster economics — same stream, same memory per node"
	echo
	echo "bench-client zipf: $nreq requests, Zipf s=$zs over $keys keys, sizes 1–256 KiB (Pareto α=1.2, cap 256 KiB)," \
		"origin latency $delay ms, $conns connections round-robin over 3 nodes. Stream: ${E[$any,$first,distinct]} distinct keys" \
		"(${E[$any,$first,distinct_mib]} MiB) = the floor of origin requests. CPU is the three instances' together; the client and" \
		"the origin ran on the same 2 cores."
	echo
	echo "| memory per node (cluster total) | system | hit ratio | origin requests | × floor | origin req/s | p50 ms | p99 ms | CPU µs/req | wall s | failed requests |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|"
	for mem in $mems; do
		for sys in $systems; do
			name=$sys
			case $sys in
			shield) name="shield (3-node cluster)" ;;
			shield-solo) name="3 × independent shield (no cluster)" ;;
			*) name="3 × independent $sys" ;;
			esac
			echo "| $mem MiB ($((3 * mem)) MiB) | $name | ${E[$sys,$mem,hit_ratio]} | ${E[$sys,$mem,origin_requests]} |" \
				"${E[$sys,$mem,floor_ratio]} | ${E[$sys,$mem,origin_rps]} | ${E[$sys,$mem,p50_ms]} | ${E[$sys,$mem,p99_ms]} |" \
				"${E[$sys,$mem,cpu]} | ${E[$sys,$mem,wall_s]} | ${E[$sys,$mem,errors]} |"
		done
	done
	if [[ " $systems " == *" shield "* ]]; then
		echo
		echo "| memory per node | shield origin requests / nginx's | / Varnish's | shield hit ratio − best peer's |"
		echo "|---|---|---|---|"
		for mem in $mems; do
			rn=— rv=— best=0
			[[ " $systems " == *" nginx "* ]] && rn=$(awk -v a="${E[shield,$mem,origin_requests]}" -v b="${E[nginx,$mem,origin_requests]}" 'BEGIN { printf "%.2f", a / b }') &&
				best=${E[nginx,$mem,hit_ratio]}
			[[ " $systems " == *" varnish "* ]] && rv=$(awk -v a="${E[shield,$mem,origin_requests]}" -v b="${E[varnish,$mem,origin_requests]}" 'BEGIN { printf "%.2f", a / b }') &&
				best=$(awk -v a="$best" -v b="${E[varnish,$mem,hit_ratio]}" 'BEGIN { print (a > b ? a : b) }')
			echo "| $mem MiB | $rn | $rv | $(awk -v a="${E[shield,$mem,hit_ratio]}" -v b="$best" 'BEGIN { printf "%+.3f", a - b }') |"
		done
	fi
	if [[ " $systems " == *" shield "* && " $systems " == *" shield-solo "* ]]; then
		echo
		echo "What the hop costs: the cluster against three independent shields (no cluster section) on the same stream;" \
			"two requests in three are forwarded."
		echo
		echo "| memory per node | independent shield CPU/req ÷ nginx's | cluster − independent shield, CPU µs/req | per forwarded request | cluster origin requests ÷ independent shield's |"
		echo "|---|---|---|---|---|"
		for mem in $mems; do
			rn=—
			[[ " $systems " == *" nginx "* ]] && rn=$(awk -v a="${E[shield-solo,$mem,cpu]}" -v b="${E[nginx,$mem,cpu]}" 'BEGIN { printf "%.2f", a / b }')
			echo "| $mem MiB | $rn |" \
				"$(awk -v a="${E[shield,$mem,cpu]}" -v b="${E[shield-solo,$mem,cpu]}" 'BEGIN { printf "%.1f | %.1f", a - b, (a - b) * 3 / 2 }') |" \
				"$(awk -v a="${E[shield,$mem,origin_requests]}" -v b="${E[shield-solo,$mem,origin_requests]}" 'BEGIN { printf "%.2f", a / b }') |"
		done
	fi
	echo
	echo "Economics run took $(($(date +%s) - started)) s."
} >"$tmp/econ.md"
if [ -n "${ECON_OUT:-}" ]; then cp "$tmp/econ.md" "$ECON_OUT"; else cat "$tmp/econ.md"; fi
