package e2e

// A small network of test hosts in Linux network namespaces, built by the
// test itself (ip netns, veth pairs, bridges) and torn down at cleanup,
// even on failure.
//
// Layout (every name carries a random per-run id, so runs never clash):
//
//	switch ns  shns<id>s: bridge br0 = cluster net 10.77.0.0/24
//	                      bridge br1 = service net 10.77.<S>.0/24, with the
//	                      origin on 10.77.<S>.254 and the host's link
//	host ns    link sh<id>h = 10.77.<S>.250, the test's only way in
//	node ns    shns<id>n<k>: c0 = 10.77.0.k on br0 (peers, Consul gossip)
//	                         s0 = 10.77.<S>.k on br1 (clients, origin)
//
// A partition cuts a node's c0: it loses its peers and their Consul
// agents but keeps its clients and the origin, as when the link between
// cache nodes fails and the paths to users and origin do not.
//
// Traffic rules: the test sends only to 10.77.<S>.0/24, and only after
// checking that the kernel routes that subnet through sh<id>h; its dialer
// refuses any other address and every dial once cleanup began, so no
// packet of the test can leave the machine.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shield-proxy/shield/internal/testenv"
)

// netnsClusterNet is the cluster network inside the namespaces; it is
// never routed from the host, so every run may use it.
const netnsClusterNet = "10.77.0"

// netnsCmdTimeout bounds one ip(8) command.
const netnsCmdTimeout = 10 * time.Second

// netnsLab is one test's network of namespaces.
type netnsLab struct {
	t        *testing.T
	id       string // random, 4 hex digits
	svcNet   string // "10.77.<S>": the service network's first three octets
	switchNS string
	hostLink string
	closing  atomic.Bool // set when cleanup starts: the dialer refuses all
	client   *http.Client
}

// netnsIP runs ip(8) with args and returns its output.
func netnsIP(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), netnsCmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// newNetnsLab builds the switch namespace, its bridges and the host link,
// or ends t (internal/testenv: a skip locally, a failure in CI) when
// namespaces cannot be made here (not root, no CAP_NET_ADMIN, no ip(8)).
func newNetnsLab(t *testing.T) *netnsLab {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		testenv.Missing(t, "netns: no ip(8) on PATH (%v): the partition test needs iproute2", err)
	}
	b := make([]byte, 2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	l := &netnsLab{t: t, id: hex.EncodeToString(b)}
	l.switchNS = "shns" + l.id + "s"
	l.hostLink = "sh" + l.id + "h"
	if out, err := netnsIP("netns", "add", l.switchNS); err != nil {
		testenv.Missing(t, "netns: cannot create a network namespace (needs root or CAP_NET_ADMIN): %v %s", err, out)
	}
	t.Cleanup(l.teardown)
	l.svcNet = l.freeServiceNet()
	l.must("-n", l.switchNS, "link", "set", "lo", "up")
	for _, br := range []string{"br0", "br1"} {
		l.must("-n", l.switchNS, "link", "add", br, "type", "bridge")
		l.must("-n", l.switchNS, "link", "set", br, "up")
	}
	l.must("-n", l.switchNS, "addr", "add", l.svcNet+".254/24", "dev", "br1")
	l.must("link", "add", l.hostLink, "type", "veth", "peer", "name", "host", "netns", l.switchNS)
	l.must("-n", l.switchNS, "link", "set", "host", "master", "br1", "up")
	l.must("addr", "add", l.svcNet+".250/24", "dev", l.hostLink)
	l.must("link", "set", l.hostLink, "up")
	l.checkRoute(l.svcNet + ".254")
	l.client = newClient()
	l.client.Transport.(*http.Transport).DialContext = (&net.Dialer{
		Timeout: 5 * time.Second,
		Control: l.guard,
	}).DialContext
	return l
}

// freeServiceNet picks 10.77.<S> with S in [1, 250] that the host has no
// address or route in, so the host link cannot shadow a real network.
func (l *netnsLab) freeServiceNet() string {
	routes, err := netnsIP("-4", "route", "show", "table", "all")
	if err != nil {
		l.t.Fatal(err)
	}
	addrs, err := netnsIP("-4", "-o", "addr", "show")
	if err != nil {
		l.t.Fatal(err)
	}
	b := make([]byte, 1)
	for range 50 {
		if _, err := rand.Read(b); err != nil {
			l.t.Fatal(err)
		}
		s := "10.77." + strconv.Itoa(1+int(b[0])%250)
		if !strings.Contains(routes, s+".") && !strings.Contains(addrs, s+".") && !strings.Contains(routes, "10.77.0.0/16") {
			return s
		}
	}
	testenv.Missing(l.t, "netns: no free 10.77.x.0/24 for the service network on this host")
	return ""
}

// checkRoute fails the test unless the kernel sends ip through the host
// link: the guard against ever sending test traffic anywhere else.
func (l *netnsLab) checkRoute(ip string) {
	out, err := netnsIP("-4", "route", "get", ip)
	if err != nil {
		l.t.Fatal(err)
	}
	if !strings.Contains(out, " dev "+l.hostLink+" ") {
		l.t.Fatalf("netns: %s is not routed through %s (%q): refusing to send traffic", ip, l.hostLink, strings.TrimSpace(out))
	}
}

// guard is the dialer's Control: only the service network, and nothing
// once teardown began.
func (l *netnsLab) guard(network, address string, _ syscall.RawConn) error {
	if l.closing.Load() {
		return fmt.Errorf("netns: dial %s after teardown began", address)
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil || !strings.HasPrefix(host, l.svcNet+".") {
		return fmt.Errorf("netns: refusing to dial %s outside %s.0/24", address, l.svcNet)
	}
	return nil
}

func (l *netnsLab) must(args ...string) {
	l.t.Helper()
	if _, err := netnsIP(args...); err != nil {
		l.t.Fatal(err)
	}
}

// teardown removes the host link and every namespace of the run. It runs
// after the processes in them were killed (their cleanups were
// registered later, so run first).
func (l *netnsLab) teardown() {
	l.closing.Store(true)
	if l.client != nil {
		l.client.CloseIdleConnections()
	}
	if _, err := netnsIP("link", "del", l.hostLink); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		l.t.Errorf("netns teardown: %v", err)
	}
	out, err := netnsIP("netns", "list")
	if err != nil {
		l.t.Errorf("netns teardown: %v", err)
		return
	}
	for line := range strings.SplitSeq(out, "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if strings.HasPrefix(name, "shns"+l.id) {
			if _, err := netnsIP("netns", "del", name); err != nil {
				l.t.Errorf("netns teardown: %v", err)
			}
		}
	}
}

// netnsHost is one test host: a namespace with a link on each network.
type netnsHost struct {
	ns        string
	k         int    // host number: the last octet on both networks
	clusterIP string // 10.77.0.k on c0
	svcIP     string // 10.77.<S>.k on s0
}

// addHost makes namespace n<k> with its two links.
func (l *netnsLab) addHost(k int) *netnsHost {
	l.t.Helper()
	h := &netnsHost{
		ns:        "shns" + l.id + "n" + strconv.Itoa(k),
		k:         k,
		clusterIP: netnsClusterNet + "." + strconv.Itoa(k),
		svcIP:     l.svcNet + "." + strconv.Itoa(k),
	}
	l.must("netns", "add", h.ns)
	l.must("-n", h.ns, "link", "set", "lo", "up")
	for _, link := range []struct{ name, bridge, ip string }{{"c0", "br0", h.clusterIP}, {"s0", "br1", h.svcIP}} {
		peer := "n" + strconv.Itoa(k) + link.name
		l.must("link", "add", link.name, "netns", h.ns, "type", "veth", "peer", "name", peer, "netns", l.switchNS)
		l.must("-n", l.switchNS, "link", "set", peer, "master", link.bridge, "up")
		l.must("-n", h.ns, "addr", "add", link.ip+"/24", "dev", link.name)
		l.must("-n", h.ns, "link", "set", link.name, "up")
	}
	l.checkRoute(h.svcIP)
	return h
}

// setCluster brings h's cluster link down (a partition) or up (a heal).
func (l *netnsLab) setCluster(h *netnsHost, up bool) {
	l.t.Helper()
	state := "down"
	if up {
		state = "up"
	}
	l.must("-n", h.ns, "link", "set", "c0", state)
}

// start runs bin inside namespace ns (ip netns exec execs it, so the PID
// is bin's own); it is killed by PID at cleanup.
func (l *netnsLab) start(name, ns, bin string, args ...string) *process {
	l.t.Helper()
	return startDirProcess(l.t, name, l.t.TempDir(), "ip", append([]string{"netns", "exec", ns, bin}, args...)...)
}

// waitReady polls url (on the service network) until it answers 200.
func (l *netnsLab) waitReady(p *process, url string, within time.Duration) {
	l.t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, err := doHTTP(l.client, http.MethodGet, url)
		if err == nil && r.status == http.StatusOK {
			return
		}
		if p.exited() {
			l.t.Fatalf("%s exited with %v before %s answered 200", p.name, p.cmd.ProcessState, url)
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("%s: %s not 200 after %v (last: %v %v)", p.name, url, within, r, err)
		}
		time.Sleep(clusterPollEvery)
	}
}
