package proxy

import (
	"bufio"
	"bytes"
	"io"
	"strings"
)

// The metrics library writes samples only; Prometheus tooling (promtool
// check metrics) wants each family's samples together, under one # HELP
// and one # TYPE line. writeFamilies regroups a scrape and adds them from
// this table; a test checks every exported family is in it.
var metricHelp = map[string][2]string{
	// family: {type, help}
	"shield_requests_total":                        {"counter", "Requests answered, by route and how the cache answered (hit, miss, collapsed, revalidated, stale, bypass, pass, error, rejected, peer)."},
	"shield_request_duration_seconds":              {"histogram", "Time from reading a request to handing the response to the server, by route."},
	"shield_stale_served_total":                    {"counter", "Stale copies served, by route and reason (stale-while-revalidate or the failure they stood in for)."},
	"shield_cache_stored_total":                    {"counter", "Responses stored in the cache, by route."},
	"shield_unrouted_requests_total":               {"counter", "Requests whose Host and path matched no route (answered 404)."},
	"shield_bad_requests_total":                    {"counter", "Requests refused as malformed (bad target or Host)."},
	"shield_connections_open":                      {"gauge", "Connections open on the public listener (HTTP/1.1 and HTTP/2)."},
	"shield_connections_max":                       {"gauge", "server.max_connections: the public listener's limit of open connections."},
	"shield_connections_refused_total":             {"counter", "Connections refused because server.max_connections were open (plain HTTP answered 503, TLS closed before the handshake)."},
	"shield_cache_corrupt_entries_total":           {"counter", "Cache entries that failed to decode or belonged to another key; treated as misses."},
	"shield_coalesced_waiters_total":               {"counter", "Requests that waited on another request's origin fetch."},
	"shield_coalesced_wait_timeouts_total":         {"counter", "Waiters that gave up at their own deadline."},
	"shield_coalesced_overflow_total":              {"counter", "Requests beyond cache.max_waiters that fetched on their own."},
	"shield_coalesced_waiters":                     {"gauge", "Requests waiting on an origin fetch now."},
	"shield_cache_overtaken_total":                 {"counter", "Answers not stored because an invalidation of their URL or tags, or a newer answer, came after their fetch started."},
	"shield_peer_purge_retries_total":              {"counter", "Purge deliveries to peers retried after a failure."},
	"shield_purge_answered_pending_total":          {"counter", "Purges answered before every peer had acknowledged them (no answer within 500ms, a failed attempt, or the peer already behind); those peers get them in the background."},
	"shield_purge_delivery_failures_total":         {"counter", "Failed attempts to deliver a purge to a peer, by peer (retried from its queue)."},
	"shield_purge_queue_dropped_total":             {"counter", "Queued purges given up on after a peer took none for 30s (dynamic membership: the peer pulls them from the purge log when it answers again)."},
	"shield_purge_queue_length":                    {"gauge", "Purges waiting in the per-peer delivery queues."},
	"shield_process_stalls_total":                  {"counter", "Times the process did not run for longer than its 400ms cache lease (SIGSTOP, CPU starvation; consul membership only): each closed the cache until every reachable peer answered a purge sync sent after the gap. Rising on a running node means it is starved of CPU."},
	"shield_admin_cross_site_refused_total":        {"counter", "State-changing admin requests (purge, reload) refused because a browser marked them as coming from another site (Sec-Fetch-Site, Origin)."},
	"shield_purge_sync_pending":                    {"gauge", "Peers in the view whose purge log this node has not synced (plus 1 before the membership source first answered, plus 1 once the node is leaving gracefully); above 0 nothing is served from the cache."},
	"shield_cache_hit_for_miss_total":              {"counter", "Hit-for-miss records written (keys whose answer could not be shared)."},
	"shield_cache_not_stored_total":                {"counter", "Origin answers not stored (private, Set-Cookie, no-store, ...)."},
	"shield_cache_invalidations_total":             {"counter", "URLs invalidated by successful unsafe requests."},
	"shield_compressed_bodies_total":               {"counter", "Bodies shield compressed itself (routes[].compress): a stored coding, or an answer passed through."},
	"shield_origin_streamed_responses_total":       {"counter", "Origin answers above cache.max_object_size streamed through uncached."},
	"shield_cache_streamed_fills_total":            {"counter", "Cacheable misses of at least 1 MiB (Content-Length) whose body went to their clients and waiters as it arrived, while being stored."},
	"shield_truncated_responses_total":             {"counter", "Responses whose body ended short after its length was sent (HTTP/1.1: connection closed; HTTP/2: stream reset), by cause: evicted (a memory entry's piece evicted while sent), disk (a disk tier file's read failed), origin (a streamed fill's origin body failed)."},
	"shield_cache_streamed_fill_failures_total":    {"counter", "Streamed fills whose origin body failed or ended early: not stored, their clients saw a truncated transfer."},
	"shield_purges_total":                          {"counter", "Purges applied through the admin listener."},
	"shield_config_reloads_total":                  {"counter", "Successful configuration reloads."},
	"shield_procs_trials_total":                    {"counter", "Trials of the processor governor (server.adaptive_procs) that ended, by result: kept (GOMAXPROCS moved), failed (moved back), inconclusive (moved back: the load changed during the trial, not counted against it). Trials that keep being kept in turn up and down mean the best count is within a window's noise."},
	"shield_procs_surges_total":                    {"counter", "Times goroutines queued for busy processors (scheduling latency p99 over 10ms) and the governor gave GOMAXPROCS its ceiling back at once."},
	"shield_config_reload_failures_total":          {"counter", "Rejected configuration reloads (the running configuration stayed)."},
	"shield_cache_entries":                         {"gauge", "Entries in the cache (fastcache)."},
	"shield_cache_bytes":                           {"gauge", "Bytes used by the cache."},
	"shield_cache_max_bytes":                       {"gauge", "Cache capacity in bytes."},
	"shield_cache_gets_total":                      {"counter", "Cache lookups."},
	"shield_cache_sets_total":                      {"counter", "Cache writes."},
	"shield_cache_misses_total":                    {"counter", "Cache lookups that found nothing."},
	"shield_cache_collisions_total":                {"counter", "Cache hash collisions (fastcache)."},
	"shield_cache_corruptions_total":               {"counter", "Corrupted cache chunks detected by fastcache."},
	"shield_cache_disk_entries":                    {"gauge", "Entries in the disk tier (0 without cache.disk)."},
	"shield_cache_disk_bytes":                      {"gauge", "Bytes of the disk tier's committed files."},
	"shield_cache_disk_fill_bytes":                 {"gauge", "Bytes reserved in the disk tier for files being written (streamed fills, entries about to be committed): with shield_cache_disk_bytes, within cache.disk.size."},
	"shield_cache_disk_fill_refused_total":         {"counter", "Disk tier files not started because the files being written already took cache.disk.size (streamed fills and whole entries): the answer was filled and stored in memory instead, or served and not stored when larger than memory takes. Pressure on shield_cache_disk_fill_bytes."},
	"shield_cache_disk_open_files":                 {"gauge", "Disk tier files kept open for hits (at most 4096)."},
	"shield_cache_disk_max_bytes":                  {"gauge", "Disk tier capacity in bytes (cache.disk.size)."},
	"shield_cache_disk_hits_total":                 {"counter", "Disk tier reads that found a valid file."},
	"shield_cache_disk_misses_total":               {"counter", "Disk tier reads that found no valid file (absent, evicted, damaged)."},
	"shield_cache_disk_writes_total":               {"counter", "Entries written to the disk tier."},
	"shield_cache_disk_evictions_total":            {"counter", "Disk tier files removed to keep the tier within cache.disk.size."},
	"shield_cache_disk_errors_total":               {"counter", "Disk tier operations that failed (full disk, I/O errors, permissions)."},
	"shield_cache_disk_corrupt_files_total":        {"counter", "Disk tier files that failed their checks (torn, truncated, damaged); removed, served as misses."},
	"shield_cache_disk_degraded":                   {"gauge", "1 while disk tier writes go to memory only after a failure, else 0."},
	"shield_cache_disk_degraded_total":             {"counter", "Times the disk tier degraded to memory only."},
	"shield_cache_disk_dropped_total":              {"counter", "Answers neither tier kept: the disk tier failed them (or was backing off after a failure) and they exceed cache.size/8; served, not stored."},
	"shield_origin_fetches_total":                  {"counter", "Origin fetches, by origin and outcome (ok, not_modified, http_5xx, timeout, error)."},
	"shield_origin_fetch_duration_seconds":         {"histogram", "Origin fetch latency to the response head, by origin."},
	"shield_origin_in_flight":                      {"gauge", "Origin fetches in flight, by origin."},
	"shield_origin_budget_rejections_total":        {"counter", "Origin fetches refused by the origin budget, by origin and reason (concurrency, rate, origin_share, shed, queue_timeout)."},
	"shield_eager_refreshes_total":                 {"counter", "Background refreshes started by cache.eager_refresh (a hit past that point of its entry's lifetime), by route. A refresh that finds the key already refreshed by another fetch asks the origin nothing but is counted."},
	"shield_usage_fail_mode":                       {"gauge", "1 while some cluster member's usage reports are missing and this node enforces the fleet limiter's bounded local allowance (docs/configuration.md, cluster.usage_interval), else 0."},
	"shield_usage_fail_mode_entered_total":         {"counter", "Times the fleet limiter entered its fail mode (a member not heard from within 3 usage intervals)."},
	"shield_shed_total":                            {"counter", "Requests whose origin fetch the origin budget refused, by route, route priority and reason (the Cache-Status detail: budget, origin-share, shed, queue-timeout)."},
	"shield_origin_retries_total":                  {"counter", "Origin fetches retried after a connection error, by origin."},
	"shield_origin_stale_connection_retries_total": {"counter", "Requests sent again at once on a new connection after a pooled keep-alive connection broke before any response byte (not origin failures), by origin."},
	"shield_origin_tls_errors_total":               {"counter", "TLS handshakes with an origin server that failed (certificate rejected, handshake error), by origin and server."},
	"shield_origin_server_up":                      {"gauge", "1 when the origin server is in rotation (not ejected, not failing health checks), by origin and server."},
	"shield_origin_server_in_flight":               {"gauge", "Requests in flight to the origin server, by origin and server."},
	"shield_origin_server_requests_total":          {"counter", "Requests sent to the origin server (retries included), by origin and server."},
	"shield_origin_server_errors_total":            {"counter", "Requests to the origin server that failed (connect error, timeout, a breaker.failure_statuses answer: 502, 503, 504 by default), by origin and server."},
	"shield_origin_server_ejections_total":         {"counter", "Times the origin server was ejected after consecutive failures, by origin and server."},
	"shield_revalidations_total":                   {"counter", "Conditional revalidations, by origin and result (not_modified, modified)."},
	"shield_origin_budget_limit":                   {"gauge", "Effective origin concurrency limit (slow start applied), by origin."},
	"shield_origin_budget_in_flight":               {"gauge", "Origin fetches holding a budget slot, by origin."},
	"shield_breaker_state":                         {"gauge", "Origin circuit breaker state: 0 closed, 1 half-open, 2 open."},
	"shield_breaker_transitions_total":             {"counter", "Breaker state changes, by origin and destination state."},
	"shield_breaker_rejections_total":              {"counter", "Origin calls the breaker refused, by origin."},
	"shield_admission_admitted_total":              {"counter", "Requests admitted, by tenant class."},
	"shield_admission_rejected_total":              {"counter", "Requests refused, by tenant class and reason (rate, concurrency; and origin budget refusals of its misses: origin_share, shed, queue_timeout)."},
	"shield_tenant_in_flight":                      {"gauge", "Admitted requests in flight, by tenant class."},
	"shield_tenant_share":                          {"gauge", "This node's fraction of the tenant class's fleet-wide rate and burst (follows demand via the usage exchange)."},
	"shield_tenant_node_rate":                      {"gauge", "Requests per second this node admits for the tenant class (rate × share)."},
	"shield_tenant_node_burst":                     {"gauge", "Bucket size this node holds for the tenant class (ceil(burst × share))."},
	"shield_usage_reports_total":                   {"counter", "Usage exchange reports, by outcome (sent, failed, received, bad)."},
	"shield_usage_silent_peers":                    {"gauge", "Peers not heard from within 3 usage intervals (each assumed to hold rate/n)."},
	"shield_peer_forbidden_total":                  {"counter", "Peer-listener requests refused (secret or address)."},
	"shield_peer_mux_connections":                  {"gauge", "Peers this node forwards to over an open multiplexed connection (cluster.transport: mux)."},
	"shield_peer_mux_refused_total":                {"counter", "Multiplexed peer connections refused at their hello (secret or address)."},
	"shield_peer_misdirected_total":                {"counter", "Peer-listener requests answered 421 (generation mismatch)."},
	"shield_cluster_generation_changes_total":      {"counter", "Peer set changes seen."},
	"shield_cluster_peers":                         {"gauge", "Nodes in the current peer set."},
	"shield_cluster_generation":                    {"gauge", "Current peer set generation (top 53 bits of the 64-bit value)."},
	"shield_consul_reachable":                      {"gauge", "1 when the membership source (Consul) answers, else 0."},
	"shield_peer_requests_total":                   {"counter", "Requests forwarded to owners, by peer and outcome (ok, error, misdirected, forbidden, skipped)."},
	"shield_peer_transport_total":                  {"counter", "Requests forwarded to owners, by peer and the transport that carried them (mux, or http: cluster.transport http, a peer on an older release, or no multiplexed connection open yet)."},
	"shield_peer_read_through_total":               {"counter", "Previous-owner read-throughs inside the overlap window, by outcome."},
	"shield_near_copies_stored_total":              {"counter", "Near copies of hot keys stored at this edge."},
	"shield_near_copy_hits_total":                  {"counter", "Requests answered from a near copy without forwarding."},
	"shield_handoff_entries_sent_total":            {"counter", "Entries handed to new owners on a graceful leave."},
	"shield_top_key_requests":                      {"gauge", "Estimated requests over the last 30-60s for this node's hottest keys (top 10 only; sampled space-saving sketch)."},
	"shield_handoff_entries_received_total":        {"counter", "Entries received from leaving nodes."},
}

// family returns the metric family of a sample name.
func family(name string) string {
	for _, suf := range [...]string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if typ, _, known := familyHelp(base); known && (typ == "histogram" || typ == "summary" && suf != "_bucket") {
				return base
			}
		}
	}
	return name
}

// familyHelp returns the type and help text of a family: shield's own
// from metricHelp, the Go and process families from runtimeFamily.
func familyHelp(fam string) (typ, help string, ok bool) {
	if m, known := metricHelp[fam]; known {
		return m[0], m[1], true
	}
	return runtimeFamily(fam)
}

// writeFamilies copies the samples in src to w grouped by family, each
// group under its # HELP and # TYPE lines.
func writeFamilies(w io.Writer, src []byte) {
	groups := map[string][]string{}
	var order []string
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		if to, ok := runtimeRename[name]; ok {
			line, name = to+line[len(name):], to
		}
		fam := family(name)
		if _, seen := groups[fam]; !seen {
			order = append(order, fam)
		}
		groups[fam] = append(groups[fam], line)
	}
	bw := bufio.NewWriter(w)
	for _, fam := range order {
		if typ, help, ok := familyHelp(fam); ok {
			bw.WriteString("# HELP " + fam + " " + help + "\n# TYPE " + fam + " " + typ + "\n")
		}
		for _, l := range groups[fam] {
			bw.WriteString(l)
			bw.WriteByte('\n')
		}
	}
	bw.Flush()
}
