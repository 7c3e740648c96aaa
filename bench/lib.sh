# Sourced by the bench scripts (peers.sh, economics.sh, disk-ab.sh, misses.sh,
# hit-ab.sh, cluster-ab.sh, profile.sh): stopping the processes a run
# started, by PID and with their children; waiting for a server to
# answer; starting nginx (start_nginx); the CPU a process tree used; the
# bench origin's request count; and the shield configuration the
# side-by-side runs use. The sourcing
# script defines die, and before calling them sets what they read: tmp
# (the run's directory), origin_port, and for cleanup_run the pid array
# and optionally watchdog.

# run_tmp name: a new directory for a run, on tmpfs when there is one
# (the stores and nginx's cache must be RAM-backed alike).
run_tmp() { mktemp -d "$( [ -d /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/shield-$1.XXXXXX"; }

# start_origin: bench/origin on origin_port, its PID in pid[origin],
# answering before it returns.
start_origin() {
	bin/bench-origin -listen 127.0.0.1:$origin_port 2>"$tmp/origin.log" &
	pid[origin]=$!
	wait_http "http://127.0.0.1:$origin_port/__origin/stats" "${pid[origin]}"
}

# median: the median of the numbers on stdin, separated by spaces or
# newlines (the mean of the middle two for an even count).
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# h2load_ok out what: h2load's report in file out spoke HTTP/2 over
# cleartext and every request succeeded with a 2xx; else die naming what.
h2load_ok() {
	# h2load's two threads print unsynchronised: the protocol line can be
	# cut by the other thread's "Main benchmark duration is started" line.
	grep -q '^Application protocol: h2c' "$1" || tr '\n' ' ' <"$1" | grep -q 'Application protocol: .*h2c' ||
		die "$2: not HTTP/2: $(grep -i protocol "$1")"
	# requests: N total, N started, N done, N succeeded, F failed, E errored, T timeout
	# status codes: N 2xx, 0 3xx, 0 4xx, 0 5xx
	awk '/^requests:/ {bad += $10 + $12 + $14} /^status codes:/ {bad += $5 + $7 + $9} END {exit bad > 0}' "$1" ||
		die "$2: failed or non-2xx requests: $(grep -E '^(requests|status codes):' "$1")"
}

# tree prints pid and all its descendants.
tree() {
	local p=$1 c
	echo "$p"
	for c in $(pgrep -P "$p" 2>/dev/null); do tree "$c"; done
}

# stop_all pids...: TERM every process of their trees, wait up to 5 s for
# them to exit, KILL what is left.
stop_all() {
	local all=() p
	for p in "$@"; do all+=($(tree "$p")); done
	for p in "${all[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for _ in $(seq 50); do
		local alive=0
		for p in "${all[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive -eq 0 ] && break
		sleep 0.1
	done
	for p in "${all[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
}

# wait_http url [pid]: any HTTP answer from url within 10 s. With pid,
# fails at once when that process has exited (its port taken by another
# server, whose answers would otherwise be measured).
wait_http() {
	for _ in $(seq 100); do
		[ -z "${2:-}" ] || kill -0 "$2" 2>/dev/null || die "exited: the server for $1 (port taken?)"
		curl -s -m 1 -o /dev/null "$1" && return 0
		sleep 0.1
	done
	die "not up: $1"
}

# cleanup_run is the EXIT trap of a run: stops the watchdog (if any) and
# every process in pid, removes tmp, exits with the run's status.
cleanup_run() {
	local rc=$?
	trap - EXIT INT TERM
	[ -n "${watchdog:-}" ] && kill $(tree "$watchdog") 2>/dev/null
	stop_all "${pid[@]}"
	wait 2>/dev/null || true
	rm -rf "$tmp"
	exit $rc
}

# cpu_ticks pids...: utime+stime of their process trees, in clock ticks
# (getconf CLK_TCK per second).
cpu_ticks() {
	local t=0 p q
	for q in "$@"; do
		for p in $(tree "$q"); do
			[ -r /proc/$p/stat ] || continue
			t=$((t + $(sed 's/.*) //' /proc/$p/stat | awk '{print $12 + $13}')))
		done
	done
	echo $t
}

# start_nginx port: nginx with bench/nginx.conf.in (no HTTP/2 port) in
# $tmp/nginx in front of bench/origin on origin_port, its PID in
# pid[nginx], answering before it returns.
start_nginx() {
	local user=""
	mkdir -p "$tmp/nginx"
	[ "$(id -u)" -eq 0 ] && user="user root;  # workers need the temp dir; bench only"
	sed -e "s/@ORIGIN_PORT@/$origin_port/" -e "s/@PORT@/$1/" -e "s|@DIR@|$tmp/nginx|g" \
		-e "s|@USER@|$user|" -e "s|@H2_LISTEN@||" bench/nginx.conf.in >"$tmp/nginx/nginx.conf"
	nginx -e "$tmp/nginx/error.log" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" 2>>"$tmp/nginx/error.log" &
	pid[nginx]=$!
	wait_http "http://127.0.0.1:$1/" "${pid[nginx]}"
}

# origin_total: requests the bench origin has answered so far.
origin_total() { curl -fsS -m 5 "http://127.0.0.1:$origin_port/__origin/stats" | sed 's/.*"total":\([0-9]*\).*/\1/'; }

# shield_yaml listen admin name [extra yaml] [routes before the catch-all]:
# shield as the operator of a regional shield runs it in the side-by-side
# runs: a 256 MiB memory tier and a disk tier (entries from cache.disk's
# threshold up, one file each, sent with sendfile) in the run's tmpfs
# directory like nginx's proxy_cache; cache.path (the snapshot, and the
# invalidation table that proves disk entries un-purged after a restart)
# beside it.
shield_yaml() {
	mkdir -p "$tmp/$3"
	cat <<YAML
listen: $1
admin: { listen: $2 }
log: { level: warn }
cache:
  size: 256MiB
  max_object_size: 16MiB
  path: $tmp/$3/snapshot
  disk: { path: $tmp/$3/disk, size: 256MiB }
origins:
  bench: { servers: ["127.0.0.1:$origin_port"], timeout: 5s, max_concurrency: 256 }
routes:
${5:-}  - name: bench
    hosts: ["*"]
    path_prefix: /
    origin: bench
    cache: { stale_while_revalidate: 10s, stale_if_error: 1h, max_stale: 1h }
${4:-}
YAML
}
