#!/usr/bin/env bash
# Soak test: e2e TestSoak (three shields, a Consul agent, the demo origin;
# bounded load, one node restarted mid-run) for SOAK_DURATION, default 10m.
# It fails if an answer is lost or a 5xx comes back, if a shield's RSS goes
# above cache.size x 1.2 + 64MiB, or if goroutines or file descriptors do
# not come back to their idle baseline. The figures are in the test log.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${SOAK_DURATION:-10m}
consul=${CONSUL_BIN:-$HOME/.cache/shield/consul}

# seconds DURATION: a whole number of s, m or h, in seconds.
seconds() {
	case "$1" in
	*[0-9]s) echo "${1%s}" ;;
	*[0-9]m) echo $((${1%m} * 60)) ;;
	*[0-9]h) echo $((${1%h} * 3600)) ;;
	*) echo "soak: SOAK_DURATION=$1: use a whole number of s, m or h (30s, 10m, 1h)" >&2; exit 2 ;;
	esac
}
secs=$(seconds "$duration")
# The run, plus start-up, the restart and the settling wait.
timeout="$((secs + 300))s"
echo "== soak for $duration (go test -timeout $timeout)"
SOAK_DURATION="$duration" CONSUL_BIN="$consul" \
	go test -count=1 -v -run '^TestSoak$' -timeout "$timeout" ./e2e/
