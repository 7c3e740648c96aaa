#!/usr/bin/env bash
# bench/disk-ab.sh: two shield builds (A and B) and nginx on disk tier hits,
# interleaved on this machine, for changes to the disk hit path.
#
#   bench/disk-ab.sh A_BINARY B_BINARY
#
# Starts bench/origin, shield A, shield B (each with bench/peers.sh's
# configuration: 256 MiB memory, a 256 MiB disk tier in a tmpfs directory)
# and nginx (bench/nginx.conf.in, open_file_cache and sendfile), warms
# PATHS on each and checks a second request no longer reaches the origin,
# then runs wrk against A, B, nginx, A, B, nginx, ... ROUNDS rounds per
# path and prints, per target and path, the median req/s, median MB/s of
# body and CPU µs per request (utime+stime of the target's processes over
# all its rounds, from /proc, divided by its requests). A hit run fails if
# the origin saw a request meanwhile or wrk got a non-2xx answer.
#
# Env: ROUNDS (5), DURATION (5s), CONNS (64), LARGE_CONNS (8: for paths of
# 1 MiB or more), THREADS (2), PATHS ("/obj/100k?size=102400"), NGINX (1;
# 0 leaves nginx out), PORT_BASE (19300: uses PORT_BASE..+6),
# HOLD (0; 1 keeps everything running after the rounds, printing the PIDs
# and ports, until interrupted: for strace or perf against one target).
# Everything it starts is killed by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 A_BINARY B_BINARY" >&2; exit 2; }
binA=$1 binB=$2
rounds=${ROUNDS:-5} duration=${DURATION:-5s} conns=${CONNS:-64} large_conns=${LARGE_CONNS:-8}
threads=${THREADS:-2} base=${PORT_BASE:-19300} with_nginx=${NGINX:-1}
read -r -a paths <<<"${PATHS:-/obj/100k?size=102400}"
origin_port=$base nginx_port=$((base + 5))

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
command -v wrk >/dev/null || die "wrk missing"
go build -o bin/bench-origin ./bench/origin

declare -A pid=()
. bench/lib.sh
tmp=$(run_tmp diskab)
chmod 755 "$tmp"
trap cleanup_run EXIT
trap 'exit 130' INT TERM

start_origin

declare -A url=([origin]=http://127.0.0.1:$origin_port)
targets=()
start_shield() { # name binary port
	local name=$1 port=$3
	shield_yaml 127.0.0.1:$port 127.0.0.1:$((port + 1)) "$name" >"$tmp/$name.yaml"
	"$2" -config "$tmp/$name.yaml" 2>"$tmp/$name.log" &
	pid[$name]=$!
	url[$name]=http://127.0.0.1:$port
	targets+=("$name")
	wait_http "http://127.0.0.1:$((port + 1))/readyz" "${pid[$name]}"
}
start_shield A "$binA" $((base + 1))
start_shield B "$binB" $((base + 3))
if [ "$with_nginx" = 1 ]; then
	start_nginx $nginx_port
	url[nginx]=http://127.0.0.1:$nginx_port
	targets+=(nginx)
fi

clk=$(getconf CLK_TCK)
size_of() { sed -n 's/.*size=\([0-9]*\).*/\1/p' <<<"$1"; }

for t in "${targets[@]}"; do
	for p in "${paths[@]}"; do curl -fsS -m 10 -o /dev/null "${url[$t]}$p"; done
done
sleep 1 # nginx renames its temp files into the cache after answering
before=$(origin_total)
for t in "${targets[@]}"; do
	for p in "${paths[@]}"; do
		got=$(curl -fsS -m 10 -o /dev/null -w '%{size_download}' "${url[$t]}$p")
		[ "$got" = "$(size_of "$p")" ] || die "$t answered $got bytes for $p"
	done
done
[ "$(origin_total)" = "$before" ] || die "a warm object reached the origin again: not cached"

if [ "${HOLD:-0}" = 1 ]; then
	for t in "${targets[@]}"; do log "$t: pid ${pid[$t]} ${url[$t]}"; done
	log "holding; interrupt to stop"
	while :; do sleep 1; done
fi

declare -A rps=() mbs=() ticks=() reqs=()
for p in "${paths[@]}"; do
	c=$conns
	[ "$(size_of "$p")" -ge $((1 << 20)) ] && c=$large_conns
	for r in $(seq "$rounds"); do
		for t in "${targets[@]}"; do
			o0=$(origin_total) c0=$(cpu_ticks "${pid[$t]}")
			timeout 120 wrk -t"$threads" -c"$c" -d"$duration" --timeout 5s "${url[$t]}$p" >"$tmp/wrk.out" ||
				die "wrk failed on $t"
			c1=$(cpu_ticks "${pid[$t]}") o1=$(origin_total)
			[ "$o1" = "$o0" ] || die "$t $p: the origin saw $((o1 - o0)) requests during a hit run"
			! grep -q Non-2xx "$tmp/wrk.out" || die "$t $p: $(grep Non-2xx "$tmp/wrk.out")"
			n=$(awk '/requests in/ {print $1}' "$tmp/wrk.out")
			v=$(awk '/^Requests\/sec:/ {print $2}' "$tmp/wrk.out")
			rps[$t,$p]+="$v " mbs[$t,$p]+="$(awk -v r="$v" -v s="$(size_of "$p")" 'BEGIN {printf "%.1f", r * s / 1e6}') "
			ticks[$t,$p]=$(( ${ticks[$t,$p]:-0} + c1 - c0 )) reqs[$t,$p]=$(( ${reqs[$t,$p]:-0} + n ))
			log "$p round $r $t: $v req/s, $((c1 - c0)) ticks for $n requests"
		done
	done
done
echo "| path | target | req/s (median) | MB/s (median) | CPU µs/req | rounds |"
echo "|---|---|---|---|---|---|"
for p in "${paths[@]}"; do
	for t in "${targets[@]}"; do
		cpu=$(awk -v t="${ticks[$t,$p]}" -v n="${reqs[$t,$p]}" -v k="$clk" 'BEGIN {printf "%.1f", t / k * 1e6 / n}')
		echo "| $p | $t | $(median <<<"${rps[$t,$p]}") | $(median <<<"${mbs[$t,$p]}") | $cpu | ${rps[$t,$p]}|"
	done
done
