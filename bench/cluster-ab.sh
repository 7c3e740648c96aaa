#!/usr/bin/env bash
# bench/cluster-ab.sh: two shield builds (A and B), each as a 3-node
# cluster, on forwarded and local 1 KiB hits, interleaved on this machine,
# for changes to the cluster's forwarded path (issue #22).
#
#   bench/cluster-ab.sh A_BINARY B_BINARY
#
# Starts bench/origin and two clusters of three nodes (bench/peers.sh's
# cluster configuration: static membership, its memory and disk tiers,
# the default transport), one per binary, on their own ports. On each
# cluster's edge (n1) it sorts CLUSTER_KEYS keys by owner from the edge's
# cache="peer" counter (bench-client classify), keeps the same number N on
# both sides, warms them, then runs wrk -t2 -c64 (bench/keys.lua cycling
# the N paths) on the edge: A local, A forwarded, B local, B forwarded,
# ROUNDS rounds. Per cluster and run it prints the median req/s, CPU µs
# per request over all three nodes (utime+stime from /proc over all
# rounds, divided by the requests), the forwarded/local ratios (#22:
# CPU <= 2.0x, req/s >= 0.7), the runtime's sysmon thread's wakeups per
# second summed over the nodes (its context switches, from
# /proc/PID/task/TID/status: sysmon is the first thread a Go program
# starts after its main one) and the context switches of all the
# nodes' threads per request. A run fails if the origin saw a request,
# wrk got a non-2xx answer, a local run forwarded anything, or a
# forwarded run forwarded less than 99% of its requests.
#
# Env: ROUNDS (5), DURATION (5s), CONNS (64), THREADS (2), CLUSTER_KEYS
# (1500), PORT_BASE (19700: uses PORT_BASE..+40), HOLD (0; 1 keeps both
# clusters running after warming, printing the PIDs, ports and key files,
# until interrupted: for perf against one node). Everything it starts is
# killed by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 A_BINARY B_BINARY" >&2; exit 2; }
declare -A bin=([A]=$1 [B]=$2)
rounds=${ROUNDS:-5} duration=${DURATION:-5s} conns=${CONNS:-64} threads=${THREADS:-2}
base=${PORT_BASE:-19700} origin_port=${PORT_BASE:-19700}
load0=$(cut -d' ' -f1-3 /proc/loadavg)

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
command -v wrk >/dev/null || die "wrk missing"
go build -o bin/bench-origin ./bench/origin
go build -o bin/bench-client ./bench/client

declare -A pid=()
. bench/lib.sh
tmp=$(run_tmp clusterab)
trap cleanup_run EXIT
trap 'exit 130' INT TERM

start_origin

# Cluster A's node i: public port cbase+i, admin cbase+5+i, peer
# cbase+10+i, where cbase is PORT_BASE+1 for A and PORT_BASE+21 for B.
cbase() { [ "$1" = A ] && echo $((base + 1)) || echo $((base + 21)); }
node_yaml() { # cluster node: the side-by-side configuration, static membership
	local c=$1 i=$2 b peers="" j
	b=$(cbase "$c")
	for j in 1 2 3; do peers+="    - { id: n$j, addr: 127.0.0.1:$((b + 10 + j)) }"$'\n'; done
	shield_yaml 127.0.0.1:$((b + i)) 127.0.0.1:$((b + 5 + i)) "$c$i" "cluster:
  node_id: n$i
  listen: 127.0.0.1:$((b + 10 + i))
  secret: bench-secret-not-for-production
  membership: static
  peers:
$peers"
}
for c in A B; do
	for i in 1 2 3; do
		node_yaml $c $i >"$tmp/$c$i.yaml"
		"${bin[$c]}" -config "$tmp/$c$i.yaml" 2>"$tmp/$c$i.log" &
		pid[$c$i]=$!
	done
done
for c in A B; do for i in 1 2 3; do wait_http "http://127.0.0.1:$(($(cbase $c) + 5 + i))/readyz" "${pid[$c$i]}"; done; done

peer_count() { # cluster: the edge's forwarded requests so far
	curl -fsS -m 5 "http://127.0.0.1:$(($(cbase "$1") + 6))/metrics" |
		awk '/^shield_requests_total\{.*cache="peer"/ {s += $2} END {print s + 0}'
}
for c in A B; do
	edge=http://127.0.0.1:$(($(cbase $c) + 1))
	bin/bench-client classify -url "$edge/c/%d?size=1024" -keys "${CLUSTER_KEYS:-1500}" \
		-metrics "http://127.0.0.1:$(($(cbase $c) + 6))/metrics" -local "$tmp/$c.local" -forwarded "$tmp/$c.fwd"
done
nk=$(wc -l <"$tmp/A.local")
for f in A.fwd B.local B.fwd; do [ "$(wc -l <"$tmp/$f")" -lt "$nk" ] && nk=$(wc -l <"$tmp/$f"); done
[ "$nk" -ge 100 ] || die "only $nk keys on one side"
for c in A B; do
	for s in local fwd; do head -n "$nk" "$tmp/$c.$s" >"$tmp/$c-$s.paths"; done
	edge=http://127.0.0.1:$(($(cbase $c) + 1))
	o0=$(origin_total) p0=$(peer_count $c)
	while read -r k; do curl -fsS -m 5 -o /dev/null "$edge$k"; done < <(head -20 "$tmp/$c-local.paths"; head -20 "$tmp/$c-fwd.paths")
	[ "$(origin_total)" = "$o0" ] || die "cluster $c: warm keys reached the origin again"
	[ "$(peer_count $c)" = $((p0 + 20)) ] || die "cluster $c: the forwarded keys were not forwarded"
done
log "$nk keys per side; load average $load0"

if [ "${HOLD:-0}" = 1 ]; then
	for c in A B; do
		for i in 1 2 3; do log "$c$i: pid ${pid[$c$i]} http://127.0.0.1:$(($(cbase $c) + i))"; done
		for s in local fwd; do log "$c $s: BENCH_PATHS=$tmp/$c-$s.paths"; done
	done
	log "holding; interrupt to stop"
	while :; do sleep 1; done
fi

clk=$(getconf CLK_TCK)
node_ticks() { # cluster node: utime+stime of one node, in clock ticks
	sed 's/.*) //' "/proc/${pid[$1$2]}/stat" | awk '{print $12 + $13}'
}
cluster_ticks() { # cluster: utime+stime of its nodes, in clock ticks
	local t=0 i
	for i in 1 2 3; do t=$((t + $(node_ticks "$1" $i))); done
	echo $t
}
ctxsw() { # file: voluntary+nonvoluntary context switches in a status file
	awk '/ctxt_switches/ {s += $2} END {print s + 0}' "$1"
}
sysmon_switches() { # cluster: context switches of each node's sysmon thread, summed
	local t=0 i tid
	for i in 1 2 3; do
		tid=$(ls "/proc/${pid[$1$i]}/task" | sort -n | sed -n 2p)
		t=$((t + $(ctxsw "/proc/${pid[$1$i]}/task/$tid/status")))
	done
	echo $t
}
all_switches() { # cluster: context switches of all its nodes' threads
	local t=0 i f
	for i in 1 2 3; do for f in /proc/"${pid[$1$i]}"/task/*/status; do t=$((t + $(ctxsw "$f"))); done; done
	echo $t
}

declare -A rps=() ticks=() reqs=() sysmon=() secs=() csw=()
for r in $(seq "$rounds"); do
	for c in A B; do
		for s in local fwd; do
			edge=http://127.0.0.1:$(($(cbase $c) + 1))
			o0=$(origin_total) p0=$(peer_count $c) c0=$(cluster_ticks $c) e0=$(node_ticks $c 1) m0=$(sysmon_switches $c) a0=$(all_switches $c) t0=$(date +%s.%N)
			BENCH_PATHS=$tmp/$c-$s.paths timeout 120 wrk -t"$threads" -c"$conns" -d"$duration" --timeout 5s \
				-s bench/keys.lua "$edge/" >"$tmp/wrk.out" || die "wrk failed on $c $s"
			c1=$(cluster_ticks $c) e1=$(node_ticks $c 1) m1=$(sysmon_switches $c) a1=$(all_switches $c) t1=$(date +%s.%N) p1=$(peer_count $c)
			[ "$(origin_total)" = "$o0" ] || die "$c $s: the origin saw requests during a hit run"
			! grep -q Non-2xx "$tmp/wrk.out" || die "$c $s: $(grep Non-2xx "$tmp/wrk.out")"
			n=$(awk '/requests in/ {print $1}' "$tmp/wrk.out")
			v=$(awk '/^Requests\/sec:/ {print $2}' "$tmp/wrk.out")
			case $s in
			local) [ "$p1" = "$p0" ] || die "$c local: $((p1 - p0)) of $n requests were forwarded" ;;
			fwd) [ $((p1 - p0)) -ge $((n * 99 / 100)) ] || die "$c fwd: only $((p1 - p0)) of $n requests were forwarded" ;;
			esac
			rps[$c,$s]+="$v " ticks[$c,$s]=$((${ticks[$c,$s]:-0} + c1 - c0)) reqs[$c,$s]=$((${reqs[$c,$s]:-0} + n))
			sysmon[$c,$s]=$((${sysmon[$c,$s]:-0} + m1 - m0)) csw[$c,$s]=$((${csw[$c,$s]:-0} + a1 - a0))
			secs[$c,$s]=$(awk -v a="${secs[$c,$s]:-0}" -v b="$t0" -v e="$t1" 'BEGIN {printf "%.3f", a + e - b}')
			log "round $r $c $s: $v req/s, $((c1 - c0)) ticks ($((e1 - e0)) on the edge) for $n requests, sysmon $((m1 - m0)) switches"
		done
	done
done

cpu() { awk -v t="${ticks[$1,$2]}" -v n="${reqs[$1,$2]}" -v k="$clk" 'BEGIN {printf "%.1f", t / k * 1e6 / n}'; }
echo "cluster A/B: A=${bin[A]} B=${bin[B]}; wrk -t$threads -c$conns -d$duration on n1, $nk keys per side," \
	"$rounds interleaved rounds; load average $load0 at start, $(cut -d' ' -f1-3 /proc/loadavg) at the end; nproc $(nproc)"
echo
echo "| build | run | req/s (median) | CPU µs/req (3 nodes) | sysmon wakes/s (3 nodes) | ctx switches/req (3 nodes) | req/s per round |"
echo "|---|---|---|---|---|---|---|"
for c in A B; do
	for s in local fwd; do
		echo "| $c | $s | $(median <<<"${rps[$c,$s]}") | $(cpu $c $s) |" \
			"$(awk -v m="${sysmon[$c,$s]}" -v t="${secs[$c,$s]}" 'BEGIN {printf "%.0f", m / t}') |" \
			"$(awk -v a="${csw[$c,$s]}" -v n="${reqs[$c,$s]}" 'BEGIN {printf "%.2f", a / n}') | ${rps[$c,$s]}|"
	done
done
echo
echo "| build | forwarded/local CPU (#22: <= 2.0) | forwarded/local req/s (#22: >= 0.7) |"
echo "|---|---|---|"
for c in A B; do
	echo "| $c | $(awk -v f="$(cpu $c fwd)" -v l="$(cpu $c local)" 'BEGIN {printf "%.2f", f / l}') |" \
		"$(awk -v f="$(median <<<"${rps[$c,fwd]}")" -v l="$(median <<<"${rps[$c,local]}")" 'BEGIN {printf "%.2f", f / l}') |"
done
