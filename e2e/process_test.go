package e2e

import (
	"bytes"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds a process's wait for readiness; exitTimeout bounds
// the wait for it to exit after a signal or a fatal start error.
const (
	startTimeout = 15 * time.Second
	exitTimeout  = 20 * time.Second
	pollInterval = 10 * time.Millisecond
)

// process is one started binary. Its output is kept in memory and shown
// in the test log when the test fails.
type process struct {
	name   string
	cmd    *exec.Cmd
	stdout *lockedBuffer
	stderr *lockedBuffer
	done   chan struct{} // closed once cmd.Wait returned
}

// lockedBuffer is a bytes.Buffer safe for the os/exec copier goroutines
// and the test goroutine at once.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startProcess runs bin with args. At cleanup a process still running is
// killed by its PID and reaped; on failure its output goes to the log.
func startProcess(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	p := &process{
		name:   name,
		cmd:    exec.Command(bin, args...),
		stdout: &lockedBuffer{},
		stderr: &lockedBuffer{},
		done:   make(chan struct{}),
	}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait() // the exit status is read from cmd.ProcessState
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s (pid %d) stderr ---\n%s--- stdout ---\n%s",
				name, p.cmd.Process.Pid, p.stderr.String(), p.stdout.String())
		}
	})
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process by PID.
func (p *process) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s to %s: %v", sig, p.name, err)
	}
	if sig == syscall.SIGSTOP {
		p.waitStopped(t)
	}
}

// waitStopped polls until every thread of the process is stopped: kill
// returns before a thread running on another CPU has taken SIGSTOP, and
// a test that then expects the process to answer nothing could still
// get one answer from it.
func (p *process) waitStopped(t *testing.T) {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/task"
	eventually(t, p.name+" stopped by SIGSTOP", func() bool {
		tasks, err := os.ReadDir(dir)
		if err != nil || len(tasks) == 0 {
			return false
		}
		for _, task := range tasks {
			stat, err := os.ReadFile(dir + "/" + task.Name() + "/stat")
			if err != nil {
				return false
			}
			// Field 3, after "pid (comm) ": the state; comm may hold
			// spaces and parentheses, so read after the last ')'.
			i := bytes.LastIndexByte(stat, ')')
			if i < 0 || i+2 >= len(stat) || (stat[i+2] != 'T' && stat[i+2] != 't') {
				return false
			}
		}
		return true
	})
}

// terminate sends SIGTERM.
func (p *process) terminate(t *testing.T) { p.signal(t, syscall.SIGTERM) }

// wait waits for the process to exit and returns its exit code.
func (p *process) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(exitTimeout):
		t.Fatalf("%s did not exit within %v", p.name, exitTimeout)
		return -1
	}
}

// waitReady polls url until it answers 200. It fails at once if the
// process exits first, and at startTimeout otherwise.
func (p *process) waitReady(t *testing.T, url string) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(startTimeout)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if p.exited() {
			t.Fatalf("%s exited with %v before %s answered 200", p.name, p.cmd.ProcessState, url)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not 200 after %v (last error: %v)", p.name, url, startTimeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// handedOut holds the ports freeAddr has returned in this run.
var handedOut sync.Map

// freeAddr returns a 127.0.0.1 address whose port was free a moment ago:
// listen on port 0, note the port, close.
func freeAddr(t *testing.T) string {
	t.Helper()
	// Ports come from below the kernel's ephemeral range (32768 and up
	// by default): a port taken from :0 and closed again is soon handed
	// to some outgoing connection as its local port, and the process we
	// start then fails to bind it. Random picks below the range collide
	// only with other picks, which are few.
	// Ports handed out once are never handed out again in this run: two
	// picks of one test (listen and admin, say) could otherwise be the
	// same free port (seen: "admin.listen: must differ from listen").
	for range 200 {
		port := 20000 + rand.IntN(12000)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ln.Close()
		if _, taken := handedOut.LoadOrStore(port, true); taken {
			continue
		}
		return addr
	}
	t.Fatalf("no free port in 20000-31999")
	return ""
}

// eventually polls cond until it holds, failing t after the deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", startTimeout, what)
		}
		time.Sleep(pollInterval)
	}
}
