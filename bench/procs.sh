# Sourced by the bench scripts (peers.sh, economics.sh, disk-ab.sh,
# hit-ab.sh, profile.sh): stopping the processes a run started, by PID
# and with their children, and waiting for a server to answer. The
# sourcing script defines die.

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
