package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	mrand "math/rand"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/internal/faultproxy"
	"github.com/brokerd/brokerd/internal/history"
)

// testNodes is a 3-node cluster of brokerd processes on 127.0.0.1.
type testNodes struct {
	t       *testing.T
	names   []string
	amqp    []string // AMQP addresses
	raft    []string // inter-node addresses
	configs []string
	procs   []*daemon
	// proxies[a][b], with startProxiedNodes, is the fault proxy on the
	// link a → b: node a's [cluster] peers list gives it as b's address
	// (nil for a == b, whose entry is a's real listen).
	proxies [][]*faultproxy.Proxy
	// paused[i] says node i was stopped with SIGSTOP.
	paused []bool
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// rebindableAddr returns a loopback address with a port free right now
// and outside the kernel's ephemeral range, so that a node restarted on
// it does not find it taken by some connection's local end meanwhile (a
// port from freeAddr is ephemeral: a restart failed with "address
// already in use" once in about 400).
func rebindableAddr(t *testing.T) string {
	t.Helper()
	low := 32768 // Linux's default start of the range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const from = 10000
	if low-from < 1000 {
		return freeAddr(t)
	}
	for range 100 {
		port := from + mrand.Intn(low-from)
		handedMu.Lock()
		taken := handed[port]
		handed[port] = true
		handedMu.Unlock()
		if taken {
			continue // one test's nodes must not share a port
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	return freeAddr(t)
}

// handed are the ports rebindableAddr returned in this process: it never
// returns one twice (the kernel would, as none is bound between the check
// and the node's start).
var (
	handedMu sync.Mutex
	handed   = map[int]bool{}
)

func startTestNodes(t *testing.T) *testNodes { return startNodes(t, false, "") }

// startTestNodesWith starts the nodes with extra added to each one's
// configuration file, right after its [cluster] table's keys (more keys
// of it, or tables of its own such as [cluster.tls]).
func startTestNodesWith(t *testing.T, extra string) *testNodes { return startNodes(t, false, extra) }

// startProxiedNodes is startTestNodes with a fault proxy on every
// directed inter-node link (testNodes.proxies), so that a test can cut,
// black-hole, silence one way or delay any of them.
func startProxiedNodes(t *testing.T) *testNodes { return startNodes(t, true, "") }

func startNodes(t *testing.T, proxied bool, extra string) *testNodes {
	tn := &testNodes{t: t, names: []string{"n1", "n2", "n3"}}
	for range tn.names {
		tn.amqp = append(tn.amqp, rebindableAddr(t))
		tn.raft = append(tn.raft, rebindableAddr(t))
	}
	raft := tn.raft
	tn.proxies = make([][]*faultproxy.Proxy, len(tn.names))
	for a := range tn.names {
		tn.proxies[a] = make([]*faultproxy.Proxy, len(tn.names))
		for b := range tn.names {
			if a == b || !proxied {
				continue
			}
			p, err := faultproxy.New(raft[b])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			tn.proxies[a][b] = p
		}
	}
	base := t.TempDir()
	for i, n := range tn.names {
		var peers []string
		for j, m := range tn.names {
			addr := raft[j]
			if p := tn.proxies[i][j]; p != nil {
				addr = p.Addr()
			}
			peers = append(peers, fmt.Sprintf("%q", m+"="+addr))
		}
		cfg := fmt.Sprintf(`[storage]
data_dir = %q
[amqp]
listen = %q
[mgmt]
listen = "off"
[cluster]
node_name = %q
listen = %q
peers = [%s]
%s
`, filepath.Join(base, n), tn.amqp[i], n, raft[i], strings.Join(peers, ", "), extra)
		path := filepath.Join(base, n+".toml")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		tn.configs = append(tn.configs, path)
	}
	tn.procs = make([]*daemon, len(tn.names))
	tn.paused = make([]bool, len(tn.names))
	for i := range tn.names {
		tn.start(i)
	}
	return tn
}

func (tn *testNodes) start(i int) {
	tn.procs[i] = startDaemon(tn.t, "", "-config", tn.configs[i])
	tn.paused[i] = false
}

// leader waits until a running node other than those in not serves
// clients, and returns its index.
func (tn *testNodes) leader(not ...int) int {
	tn.t.Helper()
	deadline := time.Now().Add(daemonStartTimeout)
	for time.Now().Before(deadline) {
		for i := range tn.procs {
			if !contains(not, i) && tn.serving(i) {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond) // polls the nodes' logs
	}
	tn.t.Fatal("no node serves clients")
	return -1
}

// awaitJoined waits until node i logs that it knows a leader: a client
// connecting to it is forwarded from then on (before, it is refused and
// connects again, as RabbitMQ clients do).
func (tn *testNodes) awaitJoined(i int) {
	tn.t.Helper()
	deadline := time.Now().Add(daemonStartTimeout)
	for tn.procs[i].count("cluster: joined") == 0 {
		if time.Now().After(deadline) {
			tn.t.Fatalf("%s did not join", tn.names[i])
		}
		time.Sleep(10 * time.Millisecond) // polls the node's log
	}
}

// alive reports whether node i's process runs (paused or not).
func (tn *testNodes) alive(i int) bool {
	d := tn.procs[i]
	if d == nil {
		return false
	}
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// serving reports whether node i runs, is not paused, and its log says it
// serves clients now: its last "serving clients" line is after its last
// "stopped leading" one.
func (tn *testNodes) serving(i int) bool {
	if !tn.alive(i) || tn.paused[i] {
		return false
	}
	d := tn.procs[i]
	d.mu.Lock()
	defer d.mu.Unlock()
	for j := len(d.stderr) - 1; j >= 0; j-- {
		switch l := d.stderr[j]; {
		case strings.Contains(l, "cluster: serving clients"):
			return true
		case strings.Contains(l, "cluster: stopped leading"):
			return false
		}
	}
	return false
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (tn *testNodes) url(i int) string { return "amqp://guest:guest@" + tn.amqp[i] + "/" }

// clusterPublisher publishes numbered persistent messages with confirms to
// queue q, through the nodes in turn, reconnecting to the next one when
// its connection fails, and records everything in rec. Its fields other
// than tn, rec and q are optional.
type clusterPublisher struct {
	tn    *testNodes
	rec   *history.Recorder
	q     string
	args  amqp091.Table // q's arguments (default: a quorum queue)
	id    string        // prefix of the message ids (several publishers)
	next  int           // the next id
	count atomic.Int64  // confirms
	// confirmTimeout is how long the publisher waits for its oldest
	// confirm before it gives the connection up (default 10 s).
	confirmTimeout time.Duration
	// pace, if set, is the least time between two publishes: it keeps a
	// fault schedule's backlog small.
	pace time.Duration
	// onConfirm, if set, is called with each confirm's id and the node
	// the publisher's connection goes to.
	onConfirm func(id string, node int)

	// sessions counts the connections made.
	sessions atomic.Int64

	mu sync.Mutex
	// lastConfirm is when the last confirm came.
	lastConfirm time.Time
	confirmed   []string // ids, in confirm order
}

// run publishes until ctx ends (returning its error) or until want
// confirms (0: no bound), trying nodes from first on.
func (p *clusterPublisher) run(ctx context.Context, first int, want int) error {
	node := first
	for want == 0 || p.count.Load() < int64(want) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err := p.session(ctx, node, want)
		if err == nil {
			return nil
		}
		node = (node + 1) % len(p.tn.names)
	}
	return nil
}

// confirmedIDs returns the ids confirmed so far.
func (p *clusterPublisher) confirmedIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.confirmed...)
}

func (p *clusterPublisher) last() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastConfirm
}

func (p *clusterPublisher) session(ctx context.Context, node int, want int) (err error) {
	p.sessions.Add(1)
	conn, raw, err := dialNode(p.tn, node)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			raw.Close() // a connection given up on: no close handshake to wait for
		}
		conn.Close()
	}()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	args := p.args
	if args == nil {
		args = amqp091.Table{"x-queue-type": "quorum"}
	}
	if _, err := ch.QueueDeclare(p.q, true, false, false, false, args); err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	timeout := p.confirmTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	type pending struct {
		id string
		dc *amqp091.DeferredConfirmation
	}
	var window []pending
	settle := func(all bool) error {
		for len(window) > 0 && (all || len(window) >= 64) {
			w := window[0]
			wctx, cancel := context.WithTimeout(ctx, timeout)
			ok, err := w.dc.WaitContext(wctx)
			cancel()
			if err != nil {
				return err // unknown: neither confirmed nor nacked
			}
			window = window[1:]
			if ok {
				p.rec.Confirmed(w.id)
				p.mu.Lock()
				p.lastConfirm = time.Now()
				p.confirmed = append(p.confirmed, w.id)
				p.mu.Unlock()
				p.count.Add(1)
				if p.onConfirm != nil {
					p.onConfirm(w.id, node)
				}
			} else {
				p.rec.Nacked(w.id)
			}
		}
		return nil
	}
	for want == 0 || p.count.Load()+int64(len(window)) < int64(want) {
		if p.pace > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(p.pace): // paces the load (time is the point)
			}
		}
		id := fmt.Sprintf("%sm%06d", p.id, p.next)
		p.next++
		p.rec.Published(id)
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", p.q, false, false,
			amqp091.Publishing{DeliveryMode: amqp091.Persistent, MessageId: id, Body: []byte(id)})
		if err != nil {
			return err
		}
		window = append(window, pending{id, dc})
		if err := settle(false); err != nil {
			return err
		}
	}
	return settle(true)
}

// dialNode connects to node i's AMQP port (its connection may be
// forwarded to the leader), returning the client connection and the
// network connection under it, which a client gives up on by closing.
func dialNode(tn *testNodes, i int) (*amqp091.Connection, net.Conn, error) {
	var raw net.Conn
	conn, err := amqp091.DialConfig(tn.url(i), amqp091.Config{Dial: func(network, addr string) (net.Conn, error) {
		c, err := amqp091.DefaultDial(2*time.Second)(network, addr)
		raw = c
		return c, err
	}})
	if err != nil {
		if raw != nil {
			raw.Close()
		}
		return nil, nil, err
	}
	return conn, raw, nil
}

// drain consumes q through node until it holds nothing more and returns
// the count delivered.
func drainCluster(t *testing.T, url string, q string, rec *history.Recorder) {
	t.Helper()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, ok, err := ch.Get(q, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return
		}
		rec.Delivered(q, m.MessageId, m.Redelivered)
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
}

// A 3-node cluster keeps every confirmed message through a kill -9 of its
// leader: a publisher connected to a follower (whose connection is
// forwarded to the leader) loses its connection with the leader, connects
// to another node, and has confirms again once a new leader serves; the
// killed node restarts and rejoins; a drain through it finds every
// confirmed message, and nothing never published.
func TestClusterKill9Leader(t *testing.T) {
	tn := startTestNodes(t)
	l := tn.leader()
	rec := history.New()
	p := &clusterPublisher{tn: tn, rec: rec, q: "work"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	follower := (l + 1) % 3
	if err := p.run(ctx, follower, 2000); err != nil {
		t.Fatal(err)
	}

	// Kill the leader while the publisher is under way.
	var wg sync.WaitGroup
	var runErr error
	wg.Add(1)
	before := p.count.Load()
	go func() {
		defer wg.Done()
		runErr = p.run(ctx, follower, 6000)
	}()
	for p.count.Load() < before+500 {
		time.Sleep(time.Millisecond) // paces the kill: some confirms in
	}
	killedAt := time.Now()
	if err := tn.procs[l].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-tn.procs[l].done
	// A client connecting to a survivor during the election is held
	// until a leader serves it, not refused.
	survivor := (l + 1) % 3
	conn, err := amqp091.Dial(tn.url(survivor))
	if err != nil {
		t.Fatalf("connect to %s during the election: %v", tn.names[survivor], err)
	}
	ch, err := conn.Channel()
	if err == nil {
		_, err = ch.QueueDeclarePassive("work", true, false, false, false, nil)
	}
	conn.Close()
	if err != nil {
		t.Fatalf("a client of %s during the election: %v", tn.names[survivor], err)
	}
	wg.Wait()
	if runErr != nil {
		t.Fatal(runErr)
	}
	l2 := tn.leader(l)
	// The survivors saw the leader's connections reset: they ran their
	// election clocks forward rather than wait out the leader's lease.
	early := 0
	for i, d := range tn.procs {
		if i != l {
			early += d.count("campaigning early")
		}
	}
	if early == 0 {
		t.Error("no survivor campaigned early on the killed leader's reset connections")
	}
	t.Logf("leader %s killed; %s leads; publisher's last confirm %v after the kill", tn.names[l], tn.names[l2], p.last().Sub(killedAt))

	tn.start(l)
	tn.awaitJoined(l)
	drainAndCheck(t, tn.url(l), "work", rec, 6000)
}

// drainAndCheck drains q through url and checks the history: nothing
// lost, phantom or silently duplicated, and at least min confirmed.
func drainAndCheck(t *testing.T, url, q string, rec *history.Recorder, min int) {
	t.Helper()
	drainCluster(t, url, q, rec)
	rep := rec.Check(history.Checks{})
	t.Log(rep)
	if !rep.OK() {
		t.Fatal(rep)
	}
	if rep.Confirmed < min {
		t.Fatalf("%d confirmed, %d wanted", rep.Confirmed, min)
	}
}

// writeClusterCert writes a self-signed certificate for 127.0.0.1 good for
// both ends of a mutual TLS connection, its own CA.
func writeClusterCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile, _ = writeCert(t, dir, "cluster", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	return certFile, keyFile
}

// With [cluster.tls] the nodes talk mutual TLS: they form the cluster,
// a publisher through a follower (its connection forwarded over TLS) gets
// its confirms, and a drain through the third node finds every message.
func TestClusterTLS(t *testing.T) {
	cert, key := writeClusterCert(t, t.TempDir())
	tn := startTestNodesWith(t, fmt.Sprintf("[cluster.tls]\ncert_file = %q\nkey_file = %q\nca_file = %q\n", cert, key, cert))
	l := tn.leader()
	rec := history.New()
	p := &clusterPublisher{tn: tn, rec: rec, q: "tls"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := p.run(ctx, (l+1)%3, 500); err != nil {
		t.Fatal(err)
	}
	// The inter-node port speaks TLS, and wants this certificate.
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(pair.Leaf)
	tc, err := tls.Dial("tcp", tn.raft[l], &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatalf("a TLS handshake with the leader's inter-node port: %v", err)
	}
	tc.Close()
	tn.awaitJoined((l + 2) % 3)
	drainCluster(t, tn.url((l+2)%3), "tls", rec)
	if rep := rec.Check(history.Checks{}); !rep.OK() || rep.Confirmed != 500 || rep.Delivered != 500 {
		t.Fatal(rep)
	}
}
