package proxy

import "strings"

// runtimeHelp describes the go_ and process_ families that
// VictoriaMetrics/metrics writes (metrics.WriteProcessMetrics). shield
// does not choose their names, but the scrape must still be valid
// exposition with HELP and TYPE for every family, so promtool check
// metrics passes on the whole of it. Families not listed here (a newer
// library, another OS) get a type from their suffix and a generic help
// line, see runtimeFamily.
var runtimeHelp = map[string][2]string{
	"go_gc_duration_seconds":              {"summary", "Go GC stop-the-world pause durations."},
	"go_gc_pauses_seconds":                {"histogram", "Go GC pause latency distribution (runtime/metrics /sched/pauses/total/gc:seconds)."},
	"go_sched_latencies_seconds":          {"histogram", "Time goroutines spent runnable before running (runtime/metrics /sched/latencies:seconds)."},
	"go_goroutines":                       {"gauge", "Goroutines that currently exist."},
	"go_threads":                          {"gauge", "OS threads created by the Go runtime."},
	"go_gomaxprocs":                       {"gauge", "GOMAXPROCS: CPUs that can run Go code at once."},
	"go_cpu_count":                        {"gauge", "Logical CPUs usable by the process."},
	"go_memlimit_bytes":                   {"gauge", "The Go runtime soft memory limit (GOMEMLIMIT)."},
	"go_info":                             {"gauge", "Go version the binary was built with (always 1)."},
	"go_info_ext":                         {"gauge", "Go compiler, GOOS, GOARCH and GOROOT of the binary (always 1)."},
	"go_cgo_calls_count":                  {"counter", "cgo calls made by the process."},
	"go_gc_forced_count":                  {"counter", "GC cycles forced by the application (runtime.GC)."},
	"go_gc_cpu_seconds_total":             {"counter", "CPU time spent in the garbage collector."},
	"go_gc_mark_assist_cpu_seconds_total": {"counter", "CPU time goroutines spent assisting the garbage collector."},
	"go_scavenge_cpu_seconds_total":       {"counter", "CPU time spent returning memory to the OS."},
	"go_mutex_wait_seconds_total":         {"counter", "Time goroutines spent blocked on sync.Mutex and sync.RWMutex."},
	"go_memstats_gc_cpu_fraction":         {"gauge", "Fraction of CPU time used by the GC since the program started."},
	"go_memstats_last_gc_time_seconds":    {"gauge", "Unix time of the last GC."},
	"process_start_time_seconds":          {"gauge", "Unix time the process started."},
	"process_num_threads":                 {"gauge", "OS threads of the process."},
	"process_cpu_seconds_total":           {"counter", "User and system CPU time of the process."},
	"process_cpu_seconds_user_total":      {"counter", "User CPU time of the process."},
	"process_cpu_seconds_system_total":    {"counter", "System CPU time of the process."},
}

// runtimeRename gives the library's families whose names break the
// exposition conventions (a counter without _total, a gauge ending in
// _count, which promtool reads as half of a summary) a conforming name.
var runtimeRename = map[string]string{
	"go_cgo_calls_count": "go_cgo_calls_total",
	"go_gc_forced_count": "go_gc_forced_total",
	"go_cpu_count":       "go_cpus",
}

// runtimeFamily returns the type and help of a go_ or process_ family.
func runtimeFamily(fam string) (typ, help string, ok bool) {
	if m, known := runtimeHelp[fam]; known {
		return m[0], m[1], true
	}
	if !strings.HasPrefix(fam, "go_") && !strings.HasPrefix(fam, "process_") {
		return "", "", false
	}
	typ = "gauge"
	if strings.HasSuffix(fam, "_total") {
		typ = "counter"
	}
	what := strings.NewReplacer("_", " ").Replace(fam)
	src := "Go runtime"
	if strings.HasPrefix(fam, "process_") {
		src = "Process (from /proc)"
		what = strings.TrimPrefix(what, "process ")
	} else {
		what = strings.TrimPrefix(strings.TrimPrefix(what, "go "), "memstats ")
		if strings.HasPrefix(fam, "go_memstats_") {
			src = "Go runtime memory statistics"
		}
	}
	return typ, src + ": " + what + ".", true
}
