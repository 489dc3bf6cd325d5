package transport

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerd/brokerd/internal/faultproxy"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait for an event: long, because the machine is
// shared; a test waits for the event, not for this.
const waitFor = 20 * time.Second

// logRec is a slog.Handler keeping every line as text ("msg k=v ..."),
// for tests that check what is logged. Safe for concurrent use.
type logRec struct {
	mu      sync.Mutex
	lines   []string
	changed signal // on every line
	t       testing.TB
}

func newLogRec(t testing.TB) *logRec { return &logRec{t: t} }

// signal wakes the tests that wait on a state: it is fired, under the
// state's lock, at every change (its channel closed and replaced).
type signal struct{ ch chan struct{} }

func (s *signal) fire() {
	if s.ch != nil {
		close(s.ch)
	}
	s.ch = make(chan struct{})
}

// next returns the channel the next fire closes. Caller holds the state's
// lock.
func (s *signal) next() <-chan struct{} {
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// awaitUnder waits until cond, evaluated with mu held, holds, waking at
// every fire of sig; after d it fails the test with failure's text.
func awaitUnder(t testing.TB, mu *sync.Mutex, sig *signal, d time.Duration, cond func() bool, failure func() string) {
	t.Helper()
	deadline := time.After(d)
	for {
		mu.Lock()
		ok := cond()
		changed := sig.next()
		mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal(failure())
		}
	}
}

func (l *logRec) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRec) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRec) WithGroup(string) slog.Handler            { return l }
func (l *logRec) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&sb, " %s=%q", a.Key, a.Value.String()); return true })
	l.mu.Lock()
	l.lines = append(l.lines, sb.String())
	l.changed.fire()
	l.mu.Unlock()
	return nil
}

// await waits for a line holding every one of parts and returns it.
func (l *logRec) await(t testing.TB, parts ...string) string {
	t.Helper()
	return l.awaitN(t, 1, parts...)
}

// awaitN waits for the n-th line holding every one of parts and returns
// it.
func (l *logRec) awaitN(t testing.TB, n int, parts ...string) string {
	t.Helper()
	var line string
	seen := 0
	awaitUnder(t, &l.mu, &l.changed, waitFor, func() bool {
		seen = 0
		for _, ln := range l.lines {
			if containsAll(ln, parts) {
				if seen++; seen == n {
					line = ln
					return true
				}
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("%d lines with %q logged in %v, want %d; lines:\n%s", seen, parts, waitFor, n, strings.Join(l.all(), "\n"))
	})
	return line
}

func (l *logRec) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// recv is a message a node's Handler received.
type recv struct {
	group uint64
	m     *pb.Message
	at    time.Time
}

// node is a transport under test with what its hooks heard.
type node struct {
	name string
	id   uint64
	ln   net.Listener // given to New; its address is the node's
	addr string
	tr   *Transport
	log  *logRec

	mu      sync.Mutex
	got     []recv
	unreach map[[2]uint64]int      // (group, peer) → reports
	up      map[string]bool        // PeerState
	ups     map[string]int         // PeerState calls with up
	snaps   map[[2]uint64][]bool   // (group, peer) → ReportSnapshot's oks
	changed signal                 // on every event
	onRecv  func(recv) (keep bool) // optional filter run first, on the reader goroutine
}

func (n *node) event() { n.changed.fire() }

func (n *node) handler(group uint64, m *pb.Message) {
	r := recv{group: group, m: m, at: time.Now()}
	if n.onRecv != nil && !n.onRecv(r) {
		return
	}
	n.mu.Lock()
	n.got = append(n.got, r)
	n.event()
	n.mu.Unlock()
}

// await waits until cond, evaluated under the node's lock, holds.
func (n *node) await(t testing.TB, what string, cond func() bool) {
	t.Helper()
	awaitUnder(t, &n.mu, &n.changed, waitFor, cond, func() string {
		return fmt.Sprintf("%s: %s did not happen in %v", n.name, what, waitFor)
	})
}

// received returns the messages of group whose Commit is marker.
func (n *node) receivedMarker(group, marker uint64) int {
	c := 0
	for _, r := range n.got {
		if r.group == group && r.m.GetCommit() == marker {
			c++
		}
	}
	return c
}

func (n *node) awaitMarker(t testing.TB, group, marker uint64) {
	t.Helper()
	n.await(t, fmt.Sprintf("message of group %d marked %d received", group, marker), func() bool { return n.receivedMarker(group, marker) > 0 })
}

func (n *node) awaitUp(t testing.TB, peer string, up bool) {
	t.Helper()
	n.await(t, fmt.Sprintf("peer %s up=%v", peer, up), func() bool { return n.up[peer] == up })
}

// upCount is how many times peer came up.
func (n *node) upCount(peer string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ups[peer]
}

// awaitReconnect waits until peer came up more than before times.
func (n *node) awaitReconnect(t testing.TB, peer string, before int) {
	t.Helper()
	n.await(t, fmt.Sprintf("peer %s up again", peer), func() bool { return n.ups[peer] > before && n.up[peer] })
}

// cluster is nodes on 127.0.0.1, optionally with a fault proxy on every
// directed link.
type cluster struct {
	nodes   []*node
	proxies map[[2]string]*faultproxy.Proxy // (from, to) → the proxy from dials to reach to
	tune    func(*Config)
}

type clusterOpts struct {
	n       int
	proxies bool
	tune    func(*Config) // adjusts every node's config
}

func newCluster(t testing.TB, o clusterOpts) *cluster {
	t.Helper()
	c := &cluster{proxies: map[[2]string]*faultproxy.Proxy{}, tune: o.tune}
	for i := range o.n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, &node{name: fmt.Sprint("n", i+1), id: uint64(i + 1), ln: ln, addr: ln.Addr().String()})
	}
	if o.proxies {
		for _, a := range c.nodes {
			for _, b := range c.nodes {
				if a == b {
					continue
				}
				p, err := faultproxy.New(b.addr)
				if err != nil {
					t.Fatal(err)
				}
				c.proxies[[2]string{a.name, b.name}] = p
			}
		}
	}
	for _, n := range c.nodes {
		c.start(t, n)
	}
	t.Cleanup(func() { c.close() })
	return c
}

// config is n's configuration: every other node its peer, through the
// proxy of the link if there is one.
func (c *cluster) config(n *node) Config {
	var peers []Peer
	for _, o := range c.nodes {
		addr := o.addr
		if p := c.proxies[[2]string{n.name, o.name}]; p != nil {
			addr = p.Addr()
		}
		peers = append(peers, Peer{Name: o.name, Addr: addr})
	}
	cfg := Config{
		Cluster: "test", Name: n.name, ID: n.id, Listener: n.ln, Peers: peers,
		Handler: n.handler,
		ReportUnreachable: func(group, peer uint64) {
			n.mu.Lock()
			n.unreach[[2]uint64{group, peer}]++
			n.event()
			n.mu.Unlock()
		},
		ReportSnapshot: func(group, peer uint64, ok bool) {
			n.mu.Lock()
			n.snaps[[2]uint64{group, peer}] = append(n.snaps[[2]uint64{group, peer}], ok)
			n.event()
			n.mu.Unlock()
		},
		PeerState: func(name string, _ uint64, up bool) {
			n.mu.Lock()
			n.up[name] = up
			if up {
				n.ups[name]++
			}
			n.event()
			n.mu.Unlock()
		},
		Logger:     slog.New(n.log),
		KeepAlive:  50 * time.Millisecond,
		DeadAfter:  time.Second,
		MinBackoff: 5 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond,
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	return cfg
}

// start starts n's transport on its listener.
func (c *cluster) start(t testing.TB, n *node) {
	t.Helper()
	n.log = newLogRec(t)
	n.mu.Lock()
	n.got, n.unreach, n.up, n.ups = nil, map[[2]uint64]int{}, map[string]bool{}, map[string]int{}
	n.snaps = map[[2]uint64][]bool{}
	n.changed = signal{}
	n.mu.Unlock()
	tr, err := New(c.config(n))
	if err != nil {
		t.Fatal(err)
	}
	n.tr = tr
}

// restart stops n and starts it again on the same address.
func (c *cluster) restart(t testing.TB, n *node) {
	t.Helper()
	n.tr.Close()
	ln, err := net.Listen("tcp", n.addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", n.addr, err)
	}
	n.ln = ln
	c.start(t, n)
}

func (c *cluster) close() {
	for _, n := range c.nodes {
		n.tr.Close()
	}
	for _, p := range c.proxies {
		p.Close()
	}
}

// connected waits until every node has every peer up.
func (c *cluster) connected(t testing.TB) {
	t.Helper()
	for _, n := range c.nodes {
		for _, o := range c.nodes {
			if o != n {
				n.awaitUp(t, o.name, true)
			}
		}
	}
}

func (c *cluster) proxy(from, to *node) *faultproxy.Proxy {
	return c.proxies[[2]string{from.name, to.name}]
}

// msg builds a message of type typ from → to, marked by its Commit.
func msg(typ pb.MessageType, from, to *node, marker uint64, entry []byte) *pb.Message {
	m := &pb.Message{Type: typ.Enum(), From: new(from.id), To: new(to.id), Commit: new(marker)}
	if entry != nil {
		m.Entries = []*pb.Entry{{Index: new(marker), Term: new(uint64(1)), Data: entry}}
	}
	return m
}
