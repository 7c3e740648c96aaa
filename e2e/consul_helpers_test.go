package e2e

import (
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// consulAgent is one test's real Consul agent: dev mode (in memory, its
// own single-server datacenter) on free loopback ports, so tests with
// separate agents share nothing and may run in parallel.
type consulAgent struct {
	proc *process
	addr string // HTTP API, 127.0.0.1:port
}

// consulStartAttempts bounds retries when a reserved port was taken by
// someone else between freePortsFor and the agent's bind.
const consulStartAttempts = 3

// consulBinary is the agent built by `make consul`: $CONSUL_BIN, else
// ~/.cache/shield/consul. A missing binary fails the test rather than
// skipping it, so CI cannot pass with the cluster untested (the package
// is skipped as a whole under -short).
func consulBinary(t *testing.T) string {
	t.Helper()
	path := os.Getenv("CONSUL_BIN")
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatalf("e2e: no CONSUL_BIN and no home directory: %v", err)
		}
		path = filepath.Join(home, ".cache", "shield", "consul")
	}
	if fi, err := os.Stat(path); err != nil || fi.IsDir() {
		t.Fatalf("e2e: the cluster tests need a Consul agent binary at %s (CONSUL_BIN, default ~/.cache/shield/consul), "+
			"none found (%v): run `make consul` first, or `go test -short` to skip e2e", path, err)
	}
	return path
}

// startConsul starts a dev agent with the dev-agent flags (two agents on one machine also need -grpc-tls-port -1),
// with every port chosen (DNS and gRPC off) and bound to 127.0.0.1 only,
// and waits until it has a leader. It is killed by PID at cleanup.
//
// Beyond the README, -grpc-tls-port -1: a 1.14 dev agent otherwise binds
// gRPC-TLS on the fixed port 8503, so a second agent running at the same
// time fails to start.
func startConsul(t *testing.T) *consulAgent {
	t.Helper()
	bin := consulBinary(t)
	var lastOutput string
	for range consulStartAttempts {
		p := freePortsFor(t, 4) // http, serf-lan, serf-wan, server
		addr := "127.0.0.1:" + strconv.Itoa(p[0])
		proc := startDirProcess(t, "consul", t.TempDir(), bin, "agent", "-dev",
			"-bind", "127.0.0.1", "-client", "127.0.0.1",
			"-http-port", strconv.Itoa(p[0]), "-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1",
			"-serf-lan-port", strconv.Itoa(p[1]), "-serf-wan-port", strconv.Itoa(p[2]),
			"-server-port", strconv.Itoa(p[3]),
			"-log-level", "info") // dev mode logs every HTTP call at debug
		if waitConsulLeader(proc, addr) {
			return &consulAgent{proc: proc, addr: addr}
		}
		if !proc.exited() {
			t.Fatalf("consul at %s: no leader after %v (its output follows)", addr, startTimeout)
		}
		lastOutput = proc.stdout.String() + proc.stderr.String()
	}
	t.Fatalf("consul exited before electing a leader (%d attempts); last output:\n%s", consulStartAttempts, lastOutput)
	return nil
}

// waitConsulLeader polls /v1/status/leader until it names a leader (the
// body is `""` before the election). It reports false if the agent exits
// or startTimeout passes.
func waitConsulLeader(proc *process, addr string) bool {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) && !proc.exited() {
		if resp, err := client.Get("http://" + addr + "/v1/status/leader"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if leader, err := strconv.Unquote(strings.TrimSpace(string(b))); resp.StatusCode == http.StatusOK && err == nil && leader != "" {
				return true
			}
		}
		time.Sleep(pollInterval)
	}
	return false
}

// kill stops the agent at once (SIGKILL by PID), as a crash would, and
// waits until it is gone.
func (a *consulAgent) kill(t *testing.T) {
	t.Helper()
	a.proc.signal(t, syscall.SIGKILL)
	a.proc.wait(t)
}

// freePortsFor reserves n distinct loopback TCP ports by holding n
// listeners at once, then closing them. Another process may still take
// one before the agent binds; startConsul retries then.
func freePortsFor(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		// Below the ephemeral range, as freeAddr explains.
		var ln net.Listener
		for range 200 {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(20000+rand.IntN(12000))))
			if err == nil {
				ln = l
				break
			}
		}
		if ln == nil {
			t.Fatalf("no free port in 20000-31999")
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// startDirProcess is startProcess with a working directory, so an agent
// writing files next to itself writes them into a temp dir, not e2e/.
// Cleanup is the same: kill by PID if still running, output on failure.
func startDirProcess(t *testing.T, name, dir, bin string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	p := &process{name: name, cmd: cmd, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = cmd.Wait() // the exit status is read from cmd.ProcessState
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s (pid %d) stderr ---\n%s--- stdout ---\n%s",
				name, cmd.Process.Pid, p.stderr.String(), p.stdout.String())
		}
	})
	return p
}
