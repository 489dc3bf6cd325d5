package transport

import (
	"context"
	"testing"
	"time"

	"github.com/brokerd/brokerd/internal/faultproxy"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Through a fault proxy on every directed link: the effect of each fault
// on the transport.

func faultCluster(t *testing.T, deadAfter time.Duration) (*cluster, *node, *node) {
	t.Helper()
	c := newCluster(t, clusterOpts{n: 2, proxies: true, tune: func(cfg *Config) {
		cfg.HandshakeTimeout = time.Second
		cfg.DeadAfter = deadAfter
	}})
	c.connected(t)
	return c, c.nodes[0], c.nodes[1]
}

func awaitProxy(t *testing.T, p *faultproxy.Proxy, cond func(faultproxy.Stats) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := p.Await(ctx, cond); err != nil {
		t.Fatalf("%v: %+v", err, p.Stats())
	}
}

func heartbeat(from, to *node, marker uint64) {
	from.tr.Group(1).Send([]*pb.Message{msg(pb.MsgHeartbeat, from, to, marker, nil)})
}

// Cutting n1 → n2: n1 sees n2 down and reports it unreachable, its
// redials are reset; n2 → n1 still delivers. Healed, n1 reconnects, and
// what it sent during the cut never arrives.
func TestFaultCut(t *testing.T) {
	c, a, b := faultCluster(t, time.Second)
	c.proxy(a, b).Cut()
	a.awaitUp(t, "n2", false)
	heartbeat(a, b, 1)
	a.await(t, "n2 reported unreachable", func() bool { return a.unreach[[2]uint64{1, b.id}] > 0 })
	a.log.await(t, "cannot connect to a peer", `peer="n2"`)
	heartbeat(b, a, 2)
	a.awaitMarker(t, 1, 2)

	healAndCheck(t, c.proxy(a, b), a, b, "during the cut")
}

// Black-holing n1 → n2: nothing passes either way on that link and no
// one is told, so n1 notices by the silence (DeadAfter) and its redials
// hang in the handshake; n2 → n1 still delivers. Healed, n1 reconnects;
// what it sent into the hole never arrives.
func TestFaultBlackHole(t *testing.T) {
	c, a, b := faultCluster(t, time.Second)
	p := c.proxy(a, b)
	p.BlackHole()
	forwarded := p.Stats().Forwarded
	heartbeat(a, b, 1)
	a.awaitUp(t, "n2", false)
	a.log.await(t, "lost the connection to a peer", `peer="n2"`, "silent for")
	heartbeat(b, a, 2)
	a.awaitMarker(t, 1, 2)
	// n1's pings and hellos went in; nothing came out.
	awaitProxy(t, p, func(s faultproxy.Stats) bool { return s.Swallowed[faultproxy.Forward] > 0 })
	if st := p.Stats(); st.Forwarded != forwarded {
		t.Fatalf("bytes passed a black hole: %+v, before %v", st, forwarded)
	}

	healAndCheck(t, p, a, b, "into the black hole")
}

// healAndCheck lets p's link from a to b pass again: a reconnects and its
// messages arrive, but the one it sent (marker 1) while the link was
// broken never does.
func healAndCheck(t *testing.T, p *faultproxy.Proxy, a, b *node, when string) {
	t.Helper()
	p.Pass()
	a.awaitUp(t, "n2", true)
	heartbeat(a, b, 3)
	b.awaitMarker(t, 1, 3)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.receivedMarker(1, 1) != 0 {
		t.Fatalf("a message sent %s arrived", when)
	}
}

// A one-way partition: n2's link to n1 is silent, n1's to n2 passes. n1's
// messages keep arriving and n1 keeps n2 up; n2 sees n1 down and its
// messages do not arrive. Also the proxy's own one-way mode on n1 → n2
// with the forward direction silenced: n1's bytes vanish.
func TestFaultOneWay(t *testing.T) {
	c, a, b := faultCluster(t, time.Second)
	c.proxy(b, a).BlackHole()
	b.awaitUp(t, "n1", false)
	heartbeat(b, a, 1)
	heartbeat(a, b, 2)
	b.awaitMarker(t, 1, 2)
	a.mu.Lock()
	if !a.up["n2"] {
		t.Error("n1 lost n2 though its link passes")
	}
	a.mu.Unlock()

	p := c.proxy(a, b)
	forwarded := p.Stats().Forwarded[faultproxy.Forward]
	p.OneWay(faultproxy.Forward)
	heartbeat(a, b, 3)
	awaitProxy(t, p, func(s faultproxy.Stats) bool { return s.Swallowed[faultproxy.Forward] > 0 })
	if got := p.Stats().Forwarded[faultproxy.Forward]; got != forwarded {
		t.Fatalf("%d bytes passed the silenced direction", got-forwarded)
	}

	// n1's connections to n2 have a hole: healing closes them, and n1
	// connects again.
	ups := a.upCount("n2")
	c.proxy(b, a).Pass()
	p.Pass()
	a.awaitReconnect(t, "n2", ups)
	b.awaitUp(t, "n1", true)
	heartbeat(b, a, 4)
	heartbeat(a, b, 5)
	a.awaitMarker(t, 1, 4)
	b.awaitMarker(t, 1, 5)
	a.mu.Lock()
	defer a.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.receivedMarker(1, 1) != 0 || b.receivedMarker(1, 3) != 0 {
		t.Fatal("a message sent into a silenced direction arrived")
	}
}

// A delay of d on n1 → n2 delays every message by at least d, and the
// connection stays up (d is under DeadAfter).
func TestFaultDelay(t *testing.T) {
	c, a, b := faultCluster(t, 10*time.Second) // no disconnect for a slow moment
	const d = 200 * time.Millisecond
	c.proxy(a, b).SetDelay(d)
	for i := range uint64(5) {
		sent := time.Now()
		heartbeat(a, b, 10+i)
		b.awaitMarker(t, 1, 10+i)
		b.mu.Lock()
		at := b.got[len(b.got)-1].at
		b.mu.Unlock()
		if lat := at.Sub(sent); lat < d {
			t.Fatalf("a message crossed a link delayed %v in %v", d, lat)
		}
	}
	if st := a.tr.Stats(); st.Disconnects != 0 {
		t.Fatalf("a delayed link disconnected: %+v", st)
	}
}
