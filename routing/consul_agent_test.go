package routing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/shield-proxy/shield/internal/testenv"
)

// consulBinary is where `make consul` builds the agent
// (~/.cache/shield/consul); CONSUL_BIN, which the Makefile sets,
// overrides it.
func consulBinary() string {
	if p := os.Getenv("CONSUL_BIN"); p != "" {
		return p
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "shield", "consul")
}

// freePorts reserves n loopback TCP ports by listening and closing. Another
// process could take one in between; the agent then fails to start and the
// test says so.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		defer l.Close()
	}
	return ports
}

// TestConsulAgent runs the whole cycle against a real dev agent: register
// with an HTTP check, see ourselves become healthy, see another instance
// join and leave, deregister. Without a consul binary it skips locally
// and fails under CI (internal/testenv).
func TestConsulAgent(t *testing.T) {
	bin := consulBinary()
	if _, err := os.Stat(bin); err != nil {
		testenv.Missing(t, "no consul agent at %s (CONSUL_BIN): run `make consul`: %v", bin, err)
	}
	p := freePorts(t, 4) // http, serf-lan, serf-wan, server
	cmd := exec.Command(bin, "agent", "-dev", "-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-http-port", strconv.Itoa(p[0]), "-dns-port", "-1", "-grpc-port", "-1",
		"-serf-lan-port", strconv.Itoa(p[1]), "-serf-wan-port", strconv.Itoa(p[2]), "-server-port", strconv.Itoa(p[3]),
		"-data-dir", t.TempDir())
	logf, err := os.Create(filepath.Join(t.TempDir(), "consul.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start consul: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("consul log:\n%s", b)
		}
		logf.Close()
	})
	addr := "127.0.0.1:" + strconv.Itoa(p[0])
	waitFor(t, "consul leader", func() bool {
		resp, err := http.Get("http://" + addr + "/v1/status/leader")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && len(b) > 2 // `""` until elected
	})

	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(health.Close)
	self := Peer{ID: "shield-self", Addr: "127.0.0.1:17070", Weight: 1}
	m := NewMembership(self, time.Second, nil)
	c, err := NewConsul(ConsulConfig{Address: addr, CheckInterval: time.Second, WaitTime: 5 * time.Second, HealthURL: health.URL + "/healthz"}, self, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Register(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	waitFor(t, "reachable", c.Reachable)

	// Another instance, registered straight through the API with no check
	// (always passing), joins and leaves.
	client, err := api.NewClient(&api.Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	other := &api.AgentServiceRegistration{ID: "shield-other", Name: DefaultConsulService, Address: "127.0.0.2", Port: 17070, Meta: map[string]string{"weight": "3"}}
	if err := client.Agent().ServiceRegister(other); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "self passing and other joined", func() bool {
		cur := m.View().Current
		o := cur.Lookup("shield-other")
		return cur.Len() == 2 && cur.Self() != nil && o != nil && o.Weight == 3 && o.Addr == "127.0.0.2:17070"
	})
	if err := client.Agent().ServiceDeregister(other.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "other left", func() bool { return m.View().Current.Lookup("shield-other") == nil })
	if err := c.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
}
