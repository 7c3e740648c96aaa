package e2e

// Process measurements of the soak test, read from /proc and /metrics.

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
)

// soakRSS is the process's resident set size in bytes (VmRSS).
func soakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("read status of pid %d: %v", pid, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest) // "12345 kB"
		if len(fields) == 2 && fields[1] == "kB" {
			if kb, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
				return kb << 10
			}
		}
		t.Fatalf("pid %d: unreadable VmRSS line %q", pid, sc.Text())
	}
	t.Fatalf("pid %d: no VmRSS in /proc status", pid)
	return 0
}

// soakFDs is how many file descriptors the process has open.
func soakFDs(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatalf("list fds of pid %d: %v", pid, err)
	}
	return len(entries)
}
