#!/usr/bin/env bash
# make bench-compare: the hit path's Go benchmarks of this working tree
# against a base commit (the previous release), on this machine, in
# interleaved runs (base, head, base, head, ...) so that both see the same
# load, compared with benchstat. Run it before a release: a slower hit
# shows here, in ns/op, before it shows in make bench-peers.
#
# Env: BASE (f1f8204, the previous release: any commit-ish), COUNT (8 runs
# each), BENCHTIME (0.5s per run), BENCH (the hit, forwarded-hit, range and
# 100 KiB hit benchmarks), MAX_SLOWDOWN (percent; set: fail when benchstat
# finds a benchmark significantly slower than this), OUT (directory the raw
# results are kept in; default a temporary one, removed).
#
# A benchmark the base does not have (BenchmarkForwardedHit, RangeHit and
# LargeHit came after f1f8204) is listed with the head's figures only.
# Wall-clock ns/op moves with the machine's load: compare on a quiet
# machine, and read the ± and p columns.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${BASE:-f1f8204} count=${COUNT:-8} benchtime=${BENCHTIME:-0.5s}
bench=${BENCH:-'^(BenchmarkHit|BenchmarkForwardedHit|BenchmarkRangeHit|BenchmarkLargeHit)$'}
cache=${CACHE:-$HOME/.cache/shield}
benchstat_version=v0.0.0-20260908200009-22c9c6c9d4da
benchstat=$cache/benchstat-$benchstat_version

log() { printf '%s bench-compare: %s\n' "$(date +%T)" "$*" >&2; }

if [ ! -x "$benchstat" ]; then
	log "building benchstat $benchstat_version into $cache"
	mkdir -p "$cache/benchstat-build"
	GOBIN=$cache/benchstat-build go install golang.org/x/perf/cmd/benchstat@$benchstat_version
	mv "$cache/benchstat-build/benchstat" "$benchstat"
fi

base_sha=$(git rev-parse --verify --quiet "$base^{commit}") || { log "BASE=$base is not a commit here"; exit 1; }
head_desc="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo +changes)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shield-bench-compare.XXXXXX")
out=${OUT:-$tmp/results}
mkdir -p "$out"
cleanup() {
	git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

log "base $base ($(git log -1 --format=%h "$base_sha")) in a temporary worktree; head $head_desc"
git worktree add --detach --quiet "$tmp/base" "$base_sha"
# Test binaries built once each; run from their package directory.
(cd "$tmp/base" && go test -c -o "$tmp/base.test" ./proxy)
go test -c -o "$tmp/head.test" ./proxy

run() { # binary dir file
	(cd "$2" && "$1" -test.run '^$' -test.bench "$bench" -test.benchmem -test.benchtime "$benchtime" -test.count 1) |
		grep '^Benchmark' >>"$3" || true
}
: >"$out/base.txt"
: >"$out/head.txt"
for i in $(seq "$count"); do
	log "round $i/$count (load $(cut -d' ' -f1 /proc/loadavg))"
	run "$tmp/base.test" "$tmp/base/proxy" "$out/base.txt"
	run "$tmp/head.test" proxy "$out/head.txt"
done
[ -s "$out/head.txt" ] || { log "no benchmark matched $bench"; exit 1; }

echo "# make bench-compare: base $base vs head $head_desc, $count interleaved runs of $benchtime, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
"$benchstat" -filter '.unit:(sec/op OR allocs/op)' base="$out/base.txt" head="$out/head.txt"
[ -n "${OUT:-}" ] && log "raw results in $out"

if [ -n "${MAX_SLOWDOWN:-}" ]; then
	# benchstat's CSV: name, base, CI, head, CI, "+12.34%" or "~", p.
	slow=$("$benchstat" -format csv -filter '.unit:sec/op' "$out/base.txt" "$out/head.txt" 2>/dev/null |
		awk -F, -v max="$MAX_SLOWDOWN" '$1 ~ /^Benchmark|-[0-9]+$/ && $6 ~ /^\+/ {
			d = $6; sub(/^\+/, "", d); sub(/%$/, "", d)
			if (d + 0 > max + 0) print $1 " " $6 }')
	if [ -n "$slow" ]; then
		log "slower than base by more than $MAX_SLOWDOWN%: $slow"
		exit 1
	fi
fi
