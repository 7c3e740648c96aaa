#!/usr/bin/env bash
# bench/hit-ab.sh: two shield builds (A and B) and the bare origin on a
# memory hit, interleaved on this machine, for changes to the hit path's
# CPU (the 1 KiB hit row of make bench-peers: shield's CPU per request
# against the bare fasthttp origin's).
#
#   bench/hit-ab.sh A_BINARY B_BINARY
#
# Starts bench/origin and shield A and B (bench/peers.sh's configuration:
# 256 MiB memory, a 256 MiB disk tier in a tmpfs directory), warms PATH on
# each and checks a second request no longer reaches the origin, then runs
# wrk -t2 -c64 against origin, A, B, then origin, B, A, ... ROUNDS rounds and
# prints, per target, the median req/s and the median over rounds of CPU
# µs per request (utime+stime of the target's processes during its run,
# from /proc, divided by its requests), and each shield's median ratio to
# the origin's CPU per request in the same round. A shield run fails if
# the origin saw a request meanwhile or wrk got a non-2xx answer.
#
# H2=1: the shields speak cleartext HTTP/2 too (server.h2c) and the load
# is h2load -t2 -c10 -m100 for DURATION (make bench-peers' h2 row); the
# origin (HTTP/1.1 only) is then not measured. TLS=1: the shields serve
# HTTPS (server.tls, a self-signed certificate made with openssl; HTTP/2
# offered by ALPN) and wrk speaks HTTP/1.1 over TLS; the origin is not
# measured either.
#
# Env: ROUNDS (6), DURATION (4s), CONNS (64), THREADS (2), H2 (0), TLS (0),
# PATH_1K ("/obj/1k?size=1024"), PORT_BASE (19740: uses PORT_BASE..+4).
# Everything it starts is killed by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 A_BINARY B_BINARY" >&2; exit 2; }
binA=$1 binB=$2
rounds=${ROUNDS:-6} duration=${DURATION:-4s} conns=${CONNS:-64} threads=${THREADS:-2}
base=${PORT_BASE:-19740} path=${PATH_1K:-/obj/1k?size=1024}
origin_port=$base

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
h2=${H2:-0} tls=${TLS:-0}
[ "$h2" = 0 ] || [ "$tls" = 0 ] || { echo "H2 and TLS: one at a time" >&2; exit 2; }
with_origin=1 # the origin speaks neither HTTP/2 nor TLS
[ "$h2" = 0 ] && [ "$tls" = 0 ] || with_origin=0
command -v wrk >/dev/null || die "wrk missing"
[ "$h2" = 0 ] || command -v h2load >/dev/null || die "h2load missing"
[ "$tls" = 0 ] || command -v openssl >/dev/null || die "openssl missing"
go build -o bin/bench-origin ./bench/origin

declare -A pid=()
. bench/lib.sh
tmp=$(run_tmp hitab)
trap cleanup_run EXIT
trap 'exit 130' INT TERM

start_origin

declare -A url=([origin]=http://127.0.0.1:$origin_port)
targets=()
[ "$with_origin" = 0 ] || targets=(origin)
scheme=http
if [ "$tls" != 0 ]; then
	scheme=https
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=127.0.0.1 \
		-keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null || die "openssl could not make a certificate"
fi
start_shield() { # name binary port
	local name=$1 port=$3
	local extra=""
	[ "$h2" = 0 ] || extra="server: { h2c: true }"
	[ "$tls" = 0 ] || extra="server: { tls: { cert_file: $tmp/cert.pem, key_file: $tmp/key.pem } }"
	shield_yaml 127.0.0.1:$port 127.0.0.1:$((port + 1)) "$name" "$extra" >"$tmp/$name.yaml"
	"$2" -config "$tmp/$name.yaml" 2>"$tmp/$name.log" &
	pid[$name]=$!
	url[$name]=$scheme://127.0.0.1:$port
	targets+=("$name")
	wait_http "http://127.0.0.1:$((port + 1))/readyz" "${pid[$name]}"
}
start_shield A "$binA" $((base + 1))
start_shield B "$binB" $((base + 3))

clk=$(getconf CLK_TCK)

for t in A B; do curl -kfsS -m 10 -o /dev/null "${url[$t]}$path"; done
before=$(origin_total)
for t in A B; do curl -kfsS -m 10 -o /dev/null "${url[$t]}$path"; done
[ "$(origin_total)" = "$before" ] || die "a warm object reached the origin again: not cached"

log "load average $(cut -d' ' -f1-3 /proc/loadavg), nproc $(nproc)"
declare -A rps=() cpu=() ratio=()
for r in $(seq "$rounds"); do
	declare -A us=()
	order=(origin A B)
	[ $((r % 2)) -eq 0 ] && order=(origin B A) # neither build always runs right after the origin
	[ "$with_origin" = 1 ] || order=("${order[@]:1}")
	for t in "${order[@]}"; do
		o0=$(origin_total) c0=$(cpu_ticks "${pid[$t]}")
		if [ "$h2" = 0 ]; then
			timeout 120 wrk -t"$threads" -c"$conns" -d"$duration" --timeout 5s "${url[$t]}$path" >"$tmp/wrk.out" ||
				die "wrk failed on $t"
			! grep -q Non-2xx "$tmp/wrk.out" || die "$t: $(grep Non-2xx "$tmp/wrk.out")"
			n=$(awk '/requests in/ {print $1}' "$tmp/wrk.out")
			v=$(awk '/^Requests\/sec:/ {print $2}' "$tmp/wrk.out")
		else
			timeout 120 h2load -t"$threads" -c10 -m100 -D "${duration%s}" "${url[$t]}$path" >"$tmp/wrk.out" 2>&1 ||
				die "h2load failed on $t: $(tail -3 "$tmp/wrk.out")"
			h2load_ok "$tmp/wrk.out" "$t"
			n=$(awk '/^requests:/ {print $8}' "$tmp/wrk.out")
			v=$(awk '/^finished in/ {print $4}' "$tmp/wrk.out")
		fi
		c1=$(cpu_ticks "${pid[$t]}") o1=$(origin_total)
		[ "$t" = origin ] || [ "$o1" = "$o0" ] || die "$t: the origin saw $((o1 - o0)) requests during a hit run"
		us[$t]=$(awk -v t="$((c1 - c0))" -v n="$n" -v k="$clk" 'BEGIN {printf "%.2f", t / k * 1e6 / n}')
		rps[$t]+="$v " cpu[$t]+="${us[$t]} "
		log "round $r $t: $v req/s, ${us[$t]} µs CPU/req"
	done
	[ "$with_origin" = 1 ] || continue
	for t in A B; do ratio[$t]+="$(awk -v a="${us[$t]}" -v o="${us[origin]}" 'BEGIN {printf "%.3f", a / o}') "; done
done
log "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| target | req/s (median) | CPU µs/req (median) | ÷ origin (median) | CPU µs/req per round |"
echo "|---|---|---|---|---|"
for t in "${targets[@]}"; do
	rat=-
	[ "$t" = origin ] || [ "$with_origin" = 0 ] || rat=$(median <<<"${ratio[$t]}")
	echo "| $t | $(median <<<"${rps[$t]}") | $(median <<<"${cpu[$t]}") | $rat | ${cpu[$t]}|"
done
