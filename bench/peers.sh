#!/usr/bin/env bash
# make bench-peers: shield against Varnish, nginx and the bare origin it
# proxies (the ceiling), measured side by side on 127.0.0.1 in one run.
#
#   - throughput runs with wrk -t2 -c64, interleaved (origin shield varnish
#     nginx, origin shield ...), ROUNDS rounds, medians reported:
#       1 KiB hit (req/s, p99, CPU per request of the target's own
#       processes), 100 KiB hit (req/s, MB/s of body, CPU per request),
#       10,000 warm keys cycled by bench/keys.lua; and a 10 MiB hit (req/s,
#       MB/s of body, CPU per request) with wrk -t2 -c8 (LARGE_CONNS): 64
#       connections each pulling 10 MiB would measure the socket buffers
#       and the scheduler rather than the cache;
#   - HTTP/2: h2load -c10 -m100 (H2_CONNS, H2_STREAMS) for DURATION on the
#     1 KiB hit, shield over cleartext HTTP/2 (server.h2c) against nginx's
#     `listen ... http2` (req/s, CPU per request); Varnish is left out;
#   - compression: an 8 KiB JSON hit with Accept-Encoding: gzip, shield
#     (compress route: gzipped once when stored) against nginx (gzip on:
#     compressed on every answer), and shield's identity answer of the same
#     object without Accept-Encoding (req/s, CPU per request). Both use a
#     second shield instance ("shield-x": h2c and the compress route) so
#     the HTTP/1.1 rows keep measuring the plain configuration;
#   - miss collapsing: 200 requests released at once for one cold key whose
#     origin answer takes 200 ms: origin requests and wall time, against
#     the same 200 requests sent to the origin itself;
#   - stale-if-error: an object past its max-age while the origin answers
#     503 to everything: does the stored copy come back?
#   - cluster economics (bench/economics.sh): a Zipf stream over 1,000,000
#     keys with heavy-tailed sizes against a 3-node shield cluster, three
#     independent nginx and three independent Varnish, same memory;
#   - the cluster figure: three shield nodes, static membership, wrk on
#     one edge node, interleaved: a hit on one key the edge owns, one hot
#     key another node owns (near copies take over above hot_key_rate),
#     and ~500 keys on each side cycled by keys.lua: local hits against
#     forwarded hits (edge -> owner), each key far below hot_key_rate.
#     Keys are sorted by owner from the edge's cache="peer" counter.
#
# Every hit run checks that the origin saw no request meanwhile, so a row
# cannot silently measure misses. It installs wrk, varnish and nginx from
# Debian when missing (needs root), prints one markdown table with the
# ratios and writes it to bench/results/<date>.md. Everything it starts is
# killed by PID on exit, failure or interrupt.
#
# Env: ROUNDS (3), DURATION (5s), CONNS (64), LARGE_CONNS (8: the 10 MiB
# hit's connections), THREADS (2), KEYS (10000), H2_CONNS (10),
# H2_STREAMS (100),
# PORT_BASE (19100: uses PORT_BASE..PORT_BASE+29), CLUSTER (1; 0 skips it),
# CLUSTER_KEYS (1500 keys sorted by owner), MAX_SECONDS (2400: watchdog),
# ECONOMICS (1; 0 skips the cluster-economics run of bench/economics.sh,
# whose ECON_* settings pass through).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3} duration=${DURATION:-5s} conns=${CONNS:-64} threads=${THREADS:-2}
large_conns=${LARGE_CONNS:-8}
keys=${KEYS:-10000} base=${PORT_BASE:-19100} with_cluster=${CLUSTER:-1}
origin_port=$base shield_port=$((base + 1)) shield_admin=$((base + 2))
varnish_port=$((base + 3)) nginx_port=$((base + 4))
nginx_h2_port=$((base + 5)) shieldx_port=$((base + 6)) shieldx_admin=$((base + 7))
h2_conns=${H2_CONNS:-10} h2_streams=${H2_STREAMS:-100}
started=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }
die() {
	log "FAIL: $*"
	local f
	for f in "${tmp:-/nonexistent}"/*.log "${tmp:-/nonexistent}"/nginx/error.log; do
		[ -s "$f" ] && { echo "--- tail $f" >&2; tail -5 "$f" >&2; }
	done
	exit 1
}

# ---- tools ---------------------------------------------------------------
install_missing() {
	local need=()
	command -v wrk >/dev/null || need+=(wrk)
	command -v h2load >/dev/null || need+=(nghttp2-client)
	command -v varnishd >/dev/null || need+=(varnish)
	command -v nginx >/dev/null || need+=(nginx-light)
	[ ${#need[@]} -eq 0 ] && return
	[ "$(id -u)" -eq 0 ] || die "need ${need[*]}: run as root or install them"
	log "installing ${need[*]}"
	# Packages must not start their system services (port 80, 6081):
	# a temporary policy-rc.d forbids it, unless one is already there.
	local policy=/usr/sbin/policy-rc.d made=0
	if [ ! -e $policy ]; then printf '#!/bin/sh\nexit 101\n' >$policy; chmod +x $policy; made=1; fi
	local ok=1
	apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
		ok=0
	[ $made -eq 1 ] && rm -f $policy
	[ $ok -eq 1 ] || die "apt-get install ${need[*]} failed"
}
install_missing
[ -x bin/shield ] || die "bin/shield missing: run make build (make bench-peers does)"
go build -o bin/bench-origin ./bench/origin
go build -o bin/bench-client ./bench/client

# The peers' own performance settings (bench/README.md).
. bench/peer-settings.sh

# ---- processes -----------------------------------------------------------
# tmpfs when there is one: nginx's cache lives here and must be RAM-backed
# like the others' stores.
. bench/lib.sh
tmp=$(run_tmp bench)
chmod 755 "$tmp" # varnishd's child runs as an unprivileged user
declare -A pid=()  # target -> main PID
watchdog=""

trap cleanup_run EXIT
trap 'exit 130' INT TERM
# The whole run is bounded even if something hangs: TERM ourselves.
(sleep "${MAX_SECONDS:-2400}"; log "watchdog: run took too long"; kill -TERM $$) 2>/dev/null &
watchdog=$!



log "starting origin, shield, varnish, nginx in $tmp (nproc $(nproc))"
start_origin

shield_yaml 127.0.0.1:$shield_port 127.0.0.1:$shield_admin shield >"$tmp/shield.yaml"
bin/shield -config "$tmp/shield.yaml" 2>"$tmp/shield.log" &
pid[shield]=$!
wait_http "http://127.0.0.1:$shield_admin/readyz" "${pid[shield]}"

# shield-x: the same configuration plus cleartext HTTP/2 and a route that
# gzips /gz/ at the shield, for the HTTP/2 and compression rows only.
shield_yaml 127.0.0.1:$shieldx_port 127.0.0.1:$shieldx_admin shield-x "server: { h2c: true }" \
	"  - name: gz
    hosts: [\"*\"]
    path_prefix: /gz/
    origin: bench
    cache: { stale_while_revalidate: 10s, stale_if_error: 1h, max_stale: 1h }
    compress: { codings: [gzip] }
" >"$tmp/shield-x.yaml"
bin/shield -config "$tmp/shield-x.yaml" 2>"$tmp/shield-x.log" &
pid[shield-x]=$!
wait_http "http://127.0.0.1:$shieldx_admin/readyz" "${pid[shield-x]}"

sed "s/@ORIGIN_PORT@/$origin_port/" bench/varnish.vcl.in >"$tmp/bench.vcl"
# shellcheck disable=SC2046 # varnish_threads prints separate flags
varnishd -F -a 127.0.0.1:$varnish_port -f "$tmp/bench.vcl" -s malloc,256m -n "$tmp/varnish" \
	$(varnish_threads "$conns") >"$tmp/varnish.log" 2>&1 &
pid[varnish]=$!

mkdir -p "$tmp/nginx"
user=""
[ "$(id -u)" -eq 0 ] && user="user root;  # workers need the temp dir; bench only"
sed -e "s/@ORIGIN_PORT@/$origin_port/" -e "s/@PORT@/$nginx_port/" -e "s|@DIR@|$tmp/nginx|g" \
	-e "s|@USER@|$user|" -e "s|@H2_LISTEN@|listen 127.0.0.1:$nginx_h2_port http2 reuseport;|" \
	bench/nginx.conf.in >"$tmp/nginx/nginx.conf"
nginx -e "$tmp/nginx/error.log" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" 2>>"$tmp/nginx/error.log" &
pid[nginx]=$!
wait_http "http://127.0.0.1:$varnish_port/"
wait_http "http://127.0.0.1:$nginx_port/"

targets=(origin shield varnish nginx)
declare -A url=(
	[origin]=http://127.0.0.1:$origin_port [shield]=http://127.0.0.1:$shield_port
	[varnish]=http://127.0.0.1:$varnish_port [nginx]=http://127.0.0.1:$nginx_port
	[shield-x]=http://127.0.0.1:$shieldx_port [nginx-h2]=http://127.0.0.1:$nginx_h2_port
)
pid[nginx-h2]=${pid[nginx]} # one nginx, two ports
stats=http://127.0.0.1:$origin_port/__origin/stats
clk=$(getconf CLK_TCK)

# ---- warm ----------------------------------------------------------------
obj1k=/obj/1k?size=1024
obj100k=/obj/100k?size=102400
size10m=$((10 << 20))
obj10m=/obj/10m?size=$size10m
log "warming the caches (3 objects + $keys keys each)"
for t in shield varnish nginx; do
	curl -fsS -m 5 -o /dev/null "${url[$t]}$obj1k"
	curl -fsS -m 5 -o /dev/null "${url[$t]}$obj100k"
	curl -fsS -m 10 -o /dev/null "${url[$t]}$obj10m"
	bin/bench-client warm -url "${url[$t]}/k/%d?size=1024" -keys "$keys" -c 32
done
sleep 1 # nginx renames its temp files into the cache after answering
before=$(origin_total)
for t in shield varnish nginx; do
	curl -fsS -m 5 -o /dev/null "${url[$t]}$obj1k"
	curl -fsS -m 5 -o /dev/null "${url[$t]}$obj100k"
	# The whole 10 MiB must come back, not a truncated or streamed-off copy.
	got=$(curl -fsS -m 10 -o /dev/null -w '%{size_download}' "${url[$t]}$obj10m")
	[ "$got" = "$size10m" ] || die "$t answered $got bytes for the 10 MiB object"
done
[ "$(origin_total)" = "$before" ] || die "a warm object reached the origin again: not cached"

# HTTP/2 and compression rows: warm shield-x and nginx, then check that
# each answer is what its row claims (HTTP/2 negotiated, gzip or not, the
# body the origin's) without reaching the origin again.
objgz="/gz/8k?size=8192&type=application/json"
for t in shield-x nginx; do
	curl -fsS -m 5 -o /dev/null "${url[$t]}$obj1k"
	curl -fsS -m 5 -o /dev/null -H 'Accept-Encoding: gzip' "${url[$t]}$objgz"
done
sleep 1 # nginx's cache files, as above
curl -fsS -m 5 -o "$tmp/gz.want" "${url[origin]}$objgz"
before=$(origin_total)
for t in shield-x nginx-h2; do
	got=$(curl -sS -m 5 --http2-prior-knowledge -o /dev/null -w '%{http_version} %{http_code}' "${url[$t]}$obj1k")
	[ "$got" = "2 200" ] || die "$t over cleartext HTTP/2 answered '$got', want '2 200'"
done
gz_answer() { # target [accept-encoding]: "status content-encoding" of the JSON hit, body decoded to gz.got
	local code
	code=$(curl -sS -m 5 -o "$tmp/gz.body" -D "$tmp/gz.head" ${2:+-H "Accept-Encoding: $2"} -w '%{http_code}' "${url[$1]}$objgz")
	local ce
	ce=$(awk -F': *' 'tolower($1) == "content-encoding" {sub(/\r$/, "", $2); print $2}' "$tmp/gz.head")
	if [ "$ce" = gzip ]; then gzip -dc <"$tmp/gz.body" >"$tmp/gz.got"; else cp "$tmp/gz.body" "$tmp/gz.got"; fi
	cmp -s "$tmp/gz.want" "$tmp/gz.got" || code="$code(body differs)"
	echo "$code ${ce:-identity}"
}
for spec in "shield-x gzip:200 gzip" "nginx gzip:200 gzip" "shield-x:200 identity"; do
	# shellcheck disable=SC2086 # target and optional coding
	got=$(gz_answer ${spec%%:*})
	[ "$got" = "${spec#*:}" ] || die "JSON hit from ${spec%%:*}: '$got', want '${spec#*:}'"
done
[ "$(origin_total)" = "$before" ] || die "the HTTP/2 or JSON checks reached the origin: not cached"

# ---- throughput rounds -----------------------------------------------------
declare -A R=() # R[target,test,round,field]
to_us() { # wrk latency (12.3us, 1.2ms, 1.0s) -> microseconds
	awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) m = 1; else if (v ~ /ms$/) m = 1000; else if (v ~ /m$/) m = 6e7; else m = 1e6; printf "%.0f", n * m }'
}
declare -A test_conns=([hit10m]=$large_conns) # tests not run with CONNS
run_wrk() { # target test round path [lua] [header]
	local t=$1 test=$2 r=$3 path=$4 lua=${5:-} out=$tmp/wrk.out
	local args=(-t"$threads" -c"${test_conns[$test]:-$conns}" -d"$duration" --timeout 5s --latency)
	[ -n "$lua" ] && args+=(-s "$lua")
	[ -n "${6:-}" ] && args+=(-H "$6")
	local o0 c0 c1 o1
	o0=$(origin_total) c0=$(cpu_ticks "${pid[$t]}")
	timeout 120 wrk "${args[@]}" "${url[$t]}$path" >"$out" || die "wrk failed on $t $test"
	c1=$(cpu_ticks "${pid[$t]}") o1=$(origin_total)
	R[$t,$test,$r,rps]=$(awk '/^Requests\/sec:/ {print $2}' "$out")
	R[$t,$test,$r,p99]=$(to_us "$(awk '$1 == "99%" {print $2}' "$out")")
	R[$t,$test,$r,n]=$(awk '/requests in/ {print $1}' "$out")
	R[$t,$test,$r,cpu]=$((c1 - c0))
	local bad
	bad=$(awk '/Non-2xx/ {print $NF}' "$out")
	[ -z "$bad" ] || die "$t $test: $bad non-2xx answers"
	if [ "$t" != origin ] && [ "$o1" != "$o0" ]; then
		die "$t $test: the origin saw $((o1 - o0)) requests during a hit run"
	fi
	log "round $r $test $t: ${R[$t,$test,$r,rps]} req/s p99 ${R[$t,$test,$r,p99]}us cpu $((c1 - c0)) ticks"
}
run_h2load() { # target test round path: h2load over cleartext HTTP/2
	local t=$1 test=$2 r=$3 path=$4 out=$tmp/h2load.out o0 c0 c1 o1
	o0=$(origin_total) c0=$(cpu_ticks "${pid[$t]}")
	timeout 120 h2load -t"$threads" -c"$h2_conns" -m"$h2_streams" -D "$duration" "${url[$t]}$path" >"$out" 2>&1 ||
		die "h2load failed on $t $test: $(tail -3 "$out")"
	c1=$(cpu_ticks "${pid[$t]}") o1=$(origin_total)
	h2load_ok "$out" "$t $test"
	# finished in 2.00s, 1234.50 req/s, ...
	# requests: N total, N started, N done, N succeeded, ...
	R[$t,$test,$r,rps]=$(awk '/^finished in/ {print $4}' "$out")
	R[$t,$test,$r,n]=$(awk '/^requests:/ {print $8}' "$out")
	R[$t,$test,$r,cpu]=$((c1 - c0))
	[ "${R[$t,$test,$r,n]}" -gt 0 ] || die "$t $test: no request succeeded"
	[ "$o1" = "$o0" ] || die "$t $test: the origin saw $((o1 - o0)) requests during a hit run"
	log "round $r $test $t: ${R[$t,$test,$r,rps]} req/s cpu $((c1 - c0)) ticks"
}
export BENCH_KEYS=$keys # read by bench/keys.lua
for r in $(seq "$rounds"); do
	for t in "${targets[@]}"; do run_wrk "$t" hit1k "$r" "$obj1k"; done
	for t in "${targets[@]}"; do run_wrk "$t" hit100k "$r" "$obj100k"; done
	for t in "${targets[@]}"; do run_wrk "$t" hit10m "$r" "$obj10m"; done
	for t in "${targets[@]}"; do run_wrk "$t" keys10k "$r" / bench/keys.lua; done
	for t in shield-x nginx-h2; do run_h2load "$t" h2hit1k "$r" "$obj1k"; done
	run_wrk shield-x gzip "$r" "$objgz" "" "Accept-Encoding: gzip"
	run_wrk shield-x identity "$r" "$objgz"
	run_wrk nginx gzip "$r" "$objgz" "" "Accept-Encoding: gzip"
done

# ---- miss collapsing -------------------------------------------------------
declare -A C=() # C[target,round,origin|wall]
for r in $(seq "$rounds"); do
	for t in "${targets[@]}"; do
		line=$(bin/bench-client collapse -n 200 -stats "$stats" \
			-url "${url[$t]}/collapse/$t-$r-$started?delay=200") || die "collapse on $t: $line"
		C[$t,$r,origin]=$(sed 's/.*origin_requests=\([0-9]*\).*/\1/' <<<"$line")
		C[$t,$r,wall]=$(sed 's/.*wall_ms=\([0-9.]*\).*/\1/' <<<"$line")
		log "collapse round $r $t: $line"
	done
done

# ---- stale-if-error ----------------------------------------------------------
sie=/sie/$started?cc=public,%20max-age=1,%20stale-if-error=600
declare -A S=()
for t in shield varnish nginx; do curl -fsS -m 5 -o "$tmp/sie-$t.want" "${url[$t]}$sie"; done
sleep 0.5
curl -fsS -m 5 -X POST -o /dev/null "http://127.0.0.1:$origin_port/__origin/fault?mode=error"
sleep 2.5 # past max-age=1 everywhere (ages are whole seconds)
for t in shield varnish nginx; do
	codes=()
	ok=yes
	for i in 1 2 3; do
		code=$(curl -sS -m 10 -o "$tmp/sie-$t.got" -w '%{http_code}' "${url[$t]}$sie" || echo 000)
		codes+=("$code")
		if [ "$code" != 200 ] || ! cmp -s "$tmp/sie-$t.want" "$tmp/sie-$t.got"; then ok=no; fi
		sleep 0.2
	done
	S[$t]="$ok ($(IFS=,; echo "${codes[*]}"))"
	log "stale-if-error $t: ${S[$t]}"
done
curl -fsS -m 5 -X POST -o /dev/null "http://127.0.0.1:$origin_port/__origin/fault?mode=ok"
S[origin]="— (is the origin)"

# ---- cluster figure ----------------------------------------------------------
if [ "$with_cluster" = 1 ]; then
	log "starting a 3-node shield cluster"
	peers=""
	for i in 1 2 3; do peers+="    - { id: n$i, addr: 127.0.0.1:$((base + 20 + i)) }"$'\n'; done
	for i in 1 2 3; do
		shield_yaml 127.0.0.1:$((base + 10 + i)) 127.0.0.1:$((base + 15 + i)) node$i \
			"cluster:
  node_id: n$i
  listen: 127.0.0.1:$((base + 20 + i))
  secret: bench-secret-not-for-production
  membership: static
  peers:
$peers" >"$tmp/node$i.yaml"
		bin/shield -config "$tmp/node$i.yaml" 2>"$tmp/node$i.log" &
		pid[node$i]=$!
	done
	for i in 1 2 3; do wait_http "http://127.0.0.1:$((base + 15 + i))/readyz"; done
	edge=http://127.0.0.1:$((base + 11))
	peer_count() {
		curl -fsS -m 5 "http://127.0.0.1:$((base + 16))/metrics" |
			awk '/^shield_requests_total\{.*cache="peer"/ {s += $2} END {print s + 0}'
	}
	log "classifying ${CLUSTER_KEYS:-1500} keys by owner"
	bin/bench-client classify -url "$edge/c/%d?size=1024" -keys "${CLUSTER_KEYS:-1500}" \
		-metrics "http://127.0.0.1:$((base + 16))/metrics" -local "$tmp/local.paths" -forwarded "$tmp/fwd.paths"
	# Same number of keys on both sides; each one far below hot_key_rate
	# (500/s) so the forwarded run forwards instead of serving near copies.
	nk=$(wc -l <"$tmp/local.paths")
	[ "$(wc -l <"$tmp/fwd.paths")" -lt "$nk" ] && nk=$(wc -l <"$tmp/fwd.paths")
	[ "$nk" -ge 100 ] || die "cluster: only $nk keys on one side"
	head -n "$nk" "$tmp/local.paths" >"$tmp/localN.paths"
	head -n "$nk" "$tmp/fwd.paths" >"$tmp/fwdN.paths"
	local_key=$(head -1 "$tmp/local.paths") fwd_key=$(head -1 "$tmp/fwd.paths")
	o0=$(origin_total) p0=$(peer_count)
	while read -r k; do curl -fsS -m 5 -o /dev/null "$edge$k"; done < <(head -20 "$tmp/localN.paths"; head -20 "$tmp/fwdN.paths")
	[ "$(origin_total)" = "$o0" ] || die "cluster: warm keys reached the origin again"
	[ "$(peer_count)" = $((p0 + 20)) ] || die "cluster: the forwarded keys were not forwarded"
	log "cluster: $nk keys per side; single keys: local $local_key, forwarded $fwd_key"
	cluster_ticks() { local s=0 i; for i in 1 2 3; do s=$((s + $(cpu_ticks "${pid[node$i]}"))); done; echo $s; }
	cluster_runs=(local1 fwd1 localN fwdN)
	for r in $(seq "$rounds"); do
		for t in "${cluster_runs[@]}"; do
			args=(-t"$threads" -c"$conns" -d"$duration" --timeout 5s --latency)
			case $t in
			local1) target=$edge$local_key ;;
			fwd1) target=$edge$fwd_key ;;
			*) target=$edge/ args+=(-s bench/keys.lua) ;;
			esac
			o0=$(origin_total) c0=$(cluster_ticks) p0=$(peer_count)
			BENCH_PATHS=$tmp/$t.paths timeout 120 wrk "${args[@]}" "$target" >"$tmp/wrk.out" || die "wrk failed on cluster $t"
			c1=$(cluster_ticks) p1=$(peer_count)
			[ "$(origin_total)" = "$o0" ] || die "cluster $t: the origin saw requests during a hit run"
			R[$t,hit1k,$r,rps]=$(awk '/^Requests\/sec:/ {print $2}' "$tmp/wrk.out")
			R[$t,hit1k,$r,p99]=$(to_us "$(awk '$1 == "99%" {print $2}' "$tmp/wrk.out")")
			R[$t,hit1k,$r,n]=$(awk '/requests in/ {print $1}' "$tmp/wrk.out")
			R[$t,hit1k,$r,cpu]=$((c1 - c0)) R[$t,hit1k,$r,fwd]=$((p1 - p0))
			n=${R[$t,hit1k,$r,n]}
			# The local runs must never be forwarded; the many-keys
			# forwarded run always (near copies are for hot keys only).
			case $t in
			local*) [ $p1 = $p0 ] || die "cluster $t: $((p1 - p0)) of $n requests were forwarded" ;;
			fwdN) [ $((p1 - p0)) -ge $((n * 99 / 100)) ] || die "cluster $t: only $((p1 - p0)) of $n requests were forwarded" ;;
			esac
			log "cluster round $r $t: ${R[$t,hit1k,$r,rps]} req/s p99 ${R[$t,hit1k,$r,p99]}us, $((p1 - p0)) of $n forwarded"
		done
	done
fi

# ---- cluster economics (bench/economics.sh, its own processes and ports) ----
if [ "${ECONOMICS:-1}" = 1 ]; then
	log "cluster economics"
	ECON_OUT=$tmp/econ.md MAX_SECONDS=1500 bench/economics.sh || die "economics run failed"
fi

# ---- report ------------------------------------------------------------------
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
med() { # target test field
	local v=() r
	for r in $(seq "$rounds"); do v+=("${R[$1,$2,$r,$3]}"); done
	median "${v[@]}"
}
cpu_per_req() { # target test: µs of CPU per request over all rounds
	local c=0 n=0 r
	for r in $(seq "$rounds"); do c=$((c + R[$1,$2,$r,cpu])) n=$((n + R[$1,$2,$r,n])); done
	awk -v c="$c" -v n="$n" -v hz="$clk" 'BEGIN { printf "%.1f", c / hz * 1e6 / n }'
}
coll() { # target field: median over rounds (origin: the largest count)
	local v=() r
	for r in $(seq "$rounds"); do v+=("${C[$1,$r,$2]}"); done
	if [ "$2" = origin ]; then printf '%s\n' "${v[@]}" | sort -g | tail -1; else median "${v[@]}"; fi
}
fmt() { awk -v v="$1" 'BEGIN { printf "%.0f", v }'; }
mbs() { awk -v r="$1" -v s="$2" 'BEGIN { printf "%.0f", r * s / 1e6 }'; } # req/s bytes: MB/s of body
declare -A M=()
for t in "${targets[@]}"; do
	M[$t,rps1k]=$(med "$t" hit1k rps) M[$t,p99]=$(med "$t" hit1k p99) M[$t,cpu]=$(cpu_per_req "$t" hit1k)
	M[$t,rps100k]=$(med "$t" hit100k rps) M[$t,rps10k]=$(med "$t" keys10k rps) M[$t,cpu100k]=$(cpu_per_req "$t" hit100k)
	M[$t,rps10m]=$(med "$t" hit10m rps) M[$t,cpu10m]=$(cpu_per_req "$t" hit10m)
	M[$t,mbs10m]=$(mbs "${M[$t,rps10m]}" "$size10m")
	M[$t,corigin]=$(coll "$t" origin) M[$t,cwall]=$(coll "$t" wall)
done
minratio() { # a b test: the smallest a/b req/s ratio over the rounds
	local r v=()
	for r in $(seq "$rounds"); do v+=("$(ratio "${R[$1,$3,$r,rps]}" "${R[$2,$3,$r,rps]}")"); done
	printf '%s\n' "${v[@]}" | sort -g | head -1
}
maxcpuratio() { # a b test: the largest a/b CPU-per-request ratio over the rounds
	local r v=()
	for r in $(seq "$rounds"); do
		v+=("$(awk -v ca="${R[$1,$3,$r,cpu]}" -v na="${R[$1,$3,$r,n]}" -v cb="${R[$2,$3,$r,cpu]}" -v nb="${R[$2,$3,$r,n]}" \
			'BEGIN { printf "%.2f", (ca / na) / (cb / nb) }')")
	done
	printf '%s\n' "${v[@]}" | sort -g | tail -1
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
check() { # description value op limit
	if awk -v v="$2" -v l="$4" -v op="$3" 'BEGIN { exit !((op == ">=" && v >= l) || (op == "<=" && v <= l) || (op == "<" && v < l) || (op == "==" && v == l)) }'; then
		echo "| $1 | $2 | $3 $4 | pass |"
	else
		echo "| $1 | $2 | $3 $4 | **FAIL** |"
	fi
}
report=$tmp/report.md
{
	echo "## make bench-peers — $(date +%F), nproc $(nproc), load average at start $load0"
	echo
	echo "wrk -t$threads -c$conns -d$duration (10 MiB hit: -c$large_conns), $rounds interleaved rounds (medians); $(uname -r);" \
		"$(varnishd -V 2>&1 | head -1 | sed 's/.*(\(varnish-[0-9.]*\).*/\1/'), nginx $(nginx -v 2>&1 | sed 's|.*/||'), $(bin/shield -version 2>/dev/null | head -1)."
	echo
	echo "| target | 1 KiB hit req/s | 1 KiB p99 µs | CPU µs/req (1 KiB) | 100 KiB hit req/s | 100 KiB MB/s | CPU µs/req (100 KiB) | 10 MiB hit req/s | 10 MiB MB/s | CPU µs/req (10 MiB) | $keys keys req/s | collapse: origin reqs | collapse: wall ms | stale-if-error |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
	for t in "${targets[@]}"; do
		name=$t
		[ "$t" = origin ] && name="bare origin (ceiling)"
		echo "| $name | $(fmt "${M[$t,rps1k]}") | ${M[$t,p99]} | ${M[$t,cpu]} | $(fmt "${M[$t,rps100k]}") |" \
			"$(mbs "${M[$t,rps100k]}" 102400) | ${M[$t,cpu100k]} |" \
			"$(awk -v v="${M[$t,rps10m]}" 'BEGIN { printf "%.1f", v }') | ${M[$t,mbs10m]} | ${M[$t,cpu10m]} | $(fmt "${M[$t,rps10k]}") |" \
			"${M[$t,corigin]} | ${M[$t,cwall]} | ${S[$t]} |"
	done
	echo
	echo "| ratio | 1 KiB req/s | 1 KiB p99 | CPU/req | 100 KiB req/s | 100 KiB CPU/req | 10 MiB MB/s | 10 MiB CPU/req | $keys keys req/s |"
	echo "|---|---|---|---|---|---|---|---|---|"
	for o in varnish nginx origin; do
		echo "| shield/$o | $(ratio "${M[shield,rps1k]}" "${M[$o,rps1k]}") | $(ratio "${M[shield,p99]}" "${M[$o,p99]}") |" \
			"$(ratio "${M[shield,cpu]}" "${M[$o,cpu]}") | $(ratio "${M[shield,rps100k]}" "${M[$o,rps100k]}") |" \
			"$(ratio "${M[shield,cpu100k]}" "${M[$o,cpu100k]}") |" \
			"$(ratio "${M[shield,rps10m]}" "${M[$o,rps10m]}") | $(ratio "${M[shield,cpu10m]}" "${M[$o,cpu10m]}") |" \
			"$(ratio "${M[shield,rps10k]}" "${M[$o,rps10k]}") |"
	done
	echo
	echo "| HTTP/2 and compression | req/s | CPU µs/req |"
	echo "|---|---|---|"
	xrow() { echo "| $3 | $(fmt "$(med "$1" "$2" rps)") | $(cpu_per_req "$1" "$2") |"; }
	xrow shield-x h2hit1k "shield, 1 KiB hit over h2c (h2load -t$threads -c$h2_conns -m$h2_streams)"
	xrow nginx-h2 h2hit1k "nginx, 1 KiB hit over h2c (listen http2)"
	xrow shield-x gzip "shield, 8 KiB JSON hit, gzip (compress route: stored coded)"
	xrow shield-x identity "shield, same object, identity (no Accept-Encoding)"
	xrow nginx gzip "nginx, 8 KiB JSON hit, gzip on (level 1, every answer)"
	echo
	echo "Collapsing: 200 requests released at once for one cold key, origin delay 200 ms; the origin row is the same" \
		"200 requests sent to the origin directly (its own latency). Collapse origin reqs is the worst round, wall the median."
	if [ "$with_cluster" = 1 ]; then
		echo
		echo "| cluster (3 shield nodes, wrk on one edge) | 1 KiB hit req/s | p99 µs | CPU µs/req (all nodes) | forwarded |"
		echo "|---|---|---|---|---|"
		crow() { # run label
			local f=0 n=0 r
			for r in $(seq "$rounds"); do f=$((f + R[$1,hit1k,$r,fwd])) n=$((n + R[$1,hit1k,$r,n])); done
			echo "| $2 | $(fmt "$(med "$1" hit1k rps)") | $(med "$1" hit1k p99) | $(cpu_per_req "$1" hit1k) | $(awk -v f="$f" -v n="$n" 'BEGIN { printf "%.0f%%", 100 * f / n }') |"
		}
		crow local1 "local hit, 1 key (edge owns it)"
		crow fwd1 "hot key owned by another node (near copies after 500 req/s)"
		crow localN "local hits, $nk keys"
		crow fwdN "forwarded hits (edge → owner), $nk keys"
		echo
		echo "forwarded/local ($nk keys each): $(ratio "$(med fwdN hit1k rps)" "$(med localN hit1k rps)")"
	fi
	echo
	echo "| target (issues #17, #22, #23, #25, #26) | measured | want | |"
	echo "|---|---|---|---|"
	check "1 KiB req/s shield/varnish, worst round" "$(minratio shield varnish hit1k)" ">=" 1.5
	check "1 KiB req/s shield/nginx, worst round" "$(minratio shield nginx hit1k)" ">=" 1.25
	check "1 KiB CPU/hit shield/bare origin" "$(ratio "${M[shield,cpu]}" "${M[origin,cpu]}")" "<=" 1.1
	check "1 KiB CPU/hit shield/bare origin, worst round" "$(maxcpuratio shield origin hit1k)" "<=" 1.1
	check "1 KiB p99 shield/varnish" "$(ratio "${M[shield,p99]}" "${M[varnish,p99]}")" "<=" 1
	check "1 KiB p99 shield/nginx" "$(ratio "${M[shield,p99]}" "${M[nginx,p99]}")" "<=" 1
	check "100 KiB req/s shield/nginx" "$(ratio "${M[shield,rps100k]}" "${M[nginx,rps100k]}")" ">=" 1
	check "100 KiB CPU/hit shield/nginx" "$(ratio "${M[shield,cpu100k]}" "${M[nginx,cpu100k]}")" "<=" 1
	check "10 MiB MB/s shield/nginx" "$(ratio "${M[shield,rps10m]}" "${M[nginx,rps10m]}")" ">=" 1
	check "collapse origin requests" "${M[shield,corigin]}" "==" 1
	check "collapse wall / origin latency" "$(ratio "${M[shield,cwall]}" "${M[origin,cwall]}")" "<=" 1.1
	check "stale-if-error served (1 = yes)" "$([[ ${S[shield]} == yes* ]] && echo 1 || echo 0)" "==" 1
	check "h2 1 KiB req/s shield/nginx" "$(ratio "$(med shield-x h2hit1k rps)" "$(med nginx-h2 h2hit1k rps)")" ">=" 1
	check "gzip hit CPU shield gzip / shield identity" "$(ratio "$(cpu_per_req shield-x gzip)" "$(cpu_per_req shield-x identity)")" "<=" 1.2
	check "gzip hit CPU shield / nginx gzip on" "$(ratio "$(cpu_per_req shield-x gzip)" "$(cpu_per_req nginx gzip)")" "<" 1
	if [ "$with_cluster" = 1 ]; then
		check "cluster forwarded/local req/s ($nk keys)" "$(ratio "$(med fwdN hit1k rps)" "$(med localN hit1k rps)")" ">=" 0.7
		check "cluster CPU forwarded/local hit ($nk keys)" "$(ratio "$(cpu_per_req fwdN hit1k)" "$(cpu_per_req localN hit1k)")" "<=" 2.0
	fi
	if [ -s "$tmp/econ.md" ]; then
		echo
		cat "$tmp/econ.md"
	fi
	echo
	echo "Run took $(($(date +%s) - started)) s. Rows per round are in the log above (stderr)."
} >"$report"
mkdir -p bench/results
out=bench/results/$(date +%F).md
cp "$report" "$out"
echo
cat "$report"
log "written to $out"
