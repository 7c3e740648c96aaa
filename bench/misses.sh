#!/usr/bin/env bash
# bench/misses.sh: what a miss costs one node, shield against nginx. The
# cluster economics run (bench/economics.sh) mixes misses with forwarded
# hits and cold starts; this isolates the miss path: one shield (bench/
# peers.sh's configuration) and one nginx (bench/nginx.conf.in), each in
# front of bench/origin, and wrk (bench/keys.lua) asking for a new key
# with every request (a fresh path prefix per run; the threads start
# STRIDE keys apart), rounds interleaved shield, nginx, shield, ... Per
# target: median req/s, median CPU µs per request (utime+stime of its
# processes during its run, from /proc, divided by its requests) and the
# origin requests per request over all its runs (1.00: every request was
# a miss; a run with a non-2xx answer fails).
#
# Env: ROUNDS (3), DURATION (5s), CONNS (64), THREADS (2), SIZE (1024:
# object bytes), DELAY (0: origin latency in ms), KEYS (400000: keys per
# run; STRIDE 200000 apart per thread, so a run must stay under 200000
# requests per thread), PORT_BASE (19760: uses PORT_BASE..+3).
# Everything it starts is killed by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3} duration=${DURATION:-5s} conns=${CONNS:-64} threads=${THREADS:-2}
size=${SIZE:-1024} delay=${DELAY:-0} keys=${KEYS:-400000} base=${PORT_BASE:-19760}
origin_port=$base shield_port=$((base + 1)) shield_admin=$((base + 2)) nginx_port=$((base + 3))

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
for b in wrk nginx; do command -v $b >/dev/null || die "$b missing (make bench-peers installs it)"; done
[ -x bin/shield ] || die "bin/shield missing: run make build"
go build -o bin/bench-origin ./bench/origin

declare -A pid=()
. bench/lib.sh
tmp=$(run_tmp misses)
trap cleanup_run EXIT
trap 'exit 130' INT TERM
clk=$(getconf CLK_TCK)

start_origin
shield_yaml 127.0.0.1:$shield_port 127.0.0.1:$shield_admin shield >"$tmp/shield.yaml"
bin/shield -config "$tmp/shield.yaml" 2>"$tmp/shield.log" &
pid[shield]=$!
wait_http "http://127.0.0.1:$shield_admin/readyz" "${pid[shield]}"
start_nginx $nginx_port
declare -A port=([shield]=$shield_port [nginx]=$nginx_port)

query="?size=$size"
[ "$delay" = 0 ] || query+="&delay=$delay"
declare -A rps=() cpu=() reqs=() fetched=()
for r in $(seq "$rounds"); do
	for t in shield nginx; do
		o0=$(origin_total) c0=$(cpu_ticks "${pid[$t]}")
		out=$(BENCH_KEYS=$keys BENCH_STRIDE=200000 BENCH_PREFIX="/miss/$t-$r-$$/" BENCH_QUERY="$query" \
			wrk -t"$threads" -c"$conns" -d"$duration" -s bench/keys.lua "http://127.0.0.1:${port[$t]}/" 2>&1) || die "wrk on $t: $out"
		c1=$(cpu_ticks "${pid[$t]}") o1=$(origin_total)
		grep -q "Non-2xx" <<<"$out" && die "$t answered non-2xx: $out"
		n=$(awk '/requests in/ {print $1}' <<<"$out")
		[ "$n" -lt $((200000 * threads)) ] || die "$t: $n requests in a run, past the threads' key stride"
		rate=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
		us=$(awk -v c=$((c1 - c0)) -v n="$n" -v hz="$clk" 'BEGIN { printf "%.1f", c / hz * 1e6 / n }')
		log "round $r $t: $rate req/s, $us µs CPU/request, $((o1 - o0)) origin requests for $n"
		rps[$t]+="$rate " cpu[$t]+="$us "
		reqs[$t]=$((${reqs[$t]:-0} + n)) fetched[$t]=$((${fetched[$t]:-0} + o1 - o0))
	done
done

echo "| target | miss req/s (median) | CPU µs/miss (median) | origin requests per request | rounds (µs) |"
echo "|---|---|---|---|---|"
for t in shield nginx; do
	echo "| $t | $(median <<<"${rps[$t]}") | $(median <<<"${cpu[$t]}") |" \
		"$(awk -v a="${fetched[$t]}" -v b="${reqs[$t]}" 'BEGIN { printf "%.2f", a / b }') | ${cpu[$t]}|"
done
echo
echo "wrk -t$threads -c$conns -d$duration, $rounds interleaved rounds, $size-byte objects, origin latency $delay ms, nproc $(nproc); $(nginx -v 2>&1 | sed 's/.*: //'), shield $(git rev-parse --short HEAD)."
