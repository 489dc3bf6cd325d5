package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func appendMarshal(t *testing.T, dst []byte, m *pb.Message) []byte {
	t.Helper()
	out, err := proto.MarshalOptions{}.MarshalAppend(dst, m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Three transports carry messages of several groups both ways between
// every pair, on both streams, each to its group.
func TestMessagesOfSeveralGroupsBothWays(t *testing.T) {
	c := newCluster(t, clusterOpts{n: 3})
	c.connected(t)
	entry := bytes.Repeat([]byte("e"), 1000)
	for _, from := range c.nodes {
		for _, to := range c.nodes {
			if from == to {
				continue
			}
			for g := uint64(1); g <= 3; g++ {
				marker := from.id*100 + g
				from.tr.Group(g).Send([]*pb.Message{
					msg(pb.MsgHeartbeat, from, to, marker, nil),
					msg(pb.MsgApp, from, to, marker+10, entry),
				})
			}
		}
	}
	for _, to := range c.nodes {
		for _, from := range c.nodes {
			if from == to {
				continue
			}
			for g := uint64(1); g <= 3; g++ {
				marker := from.id*100 + g
				to.awaitMarker(t, g, marker)
				to.awaitMarker(t, g, marker+10)
			}
		}
		to.mu.Lock()
		for _, r := range to.got {
			if r.m.GetTo() != to.id || r.m.GetCommit()/100 != r.m.GetFrom() || r.m.GetCommit()%10 != r.group {
				t.Errorf("%s received %v in group %d", to.name, r.m, r.group)
			}
			if r.m.GetType() == pb.MsgApp && !bytes.Equal(r.m.GetEntries()[0].GetData(), entry) {
				t.Errorf("%s received an entry of %d bytes, not the one sent", to.name, len(r.m.GetEntries()[0].GetData()))
			}
		}
		if len(to.got) != 12 {
			t.Errorf("%s received %d messages, want 12", to.name, len(to.got))
		}
		to.mu.Unlock()
		if st := to.tr.Stats(); st.Dropped != 0 || st.Received != 12 {
			t.Errorf("%s: %+v", to.name, st)
		}
		for _, p := range to.tr.Peers() {
			if !p.SmallUp || !p.BulkUp || p.ID == 0 {
				t.Errorf("%s: peer %+v", to.name, p)
			}
		}
	}
}

// A heartbeat is not held behind appends: with the receiver's reading
// of appends stopped (its handler blocked on the first one), heartbeats
// still arrive. On one connection they would wait forever.
func TestSmallStreamNotBehindBulk(t *testing.T) {
	c := newCluster(t, clusterOpts{n: 2})
	a, b := c.nodes[0], c.nodes[1]
	c.connected(t)
	const heartbeats = 50
	release := make(chan struct{})
	var releaseOnce sync.Once
	// Before the cluster closes (cleanups run last first): a failed
	// test's blocked handler would hold Close forever.
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	blocked := make(chan struct{})
	apps, seen := 0, 0
	b.onRecv = func(r recv) bool {
		switch r.m.GetType() {
		case pb.MsgApp:
			if apps++; apps == 1 {
				close(blocked)
			}
			<-release // the bulk connection is not read meanwhile
		case pb.MsgHeartbeat:
			if seen++; seen == heartbeats {
				releaseOnce.Do(func() { close(release) })
			}
		}
		return true
	}
	big := bytes.Repeat([]byte("x"), 1<<20)
	for i := range uint64(8) {
		a.tr.Group(1).Send([]*pb.Message{msg(pb.MsgApp, a, b, 1000+i, big)})
	}
	// Only once the blocked handler holds the first append: the
	// heartbeats are sent while appends are stuck before them.
	select {
	case <-blocked:
	case <-time.After(waitFor):
		t.Fatal("no append received")
	}
	for i := range uint64(heartbeats) {
		a.tr.Group(1).Send([]*pb.Message{msg(pb.MsgHeartbeat, a, b, i, nil)})
	}
	b.await(t, "8 appends received after the heartbeats", func() bool {
		n := 0
		for _, r := range b.got {
			if r.m.GetType() == pb.MsgApp {
				n++
			}
		}
		return n == 8
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.got[0].m.GetType() != pb.MsgHeartbeat || b.receivedMarker(1, heartbeats-1) != 1 {
		t.Fatalf("first received %v", b.got[0].m)
	}
}

// While 64 MiB of 1 MiB appends saturate the bulk stream, a heartbeat a
// millisecond on the small stream keeps arriving: none dropped, and the
// latencies are logged (figures: run with -v, without -race).
func TestSmallStreamFlowsUnderBulkLoad(t *testing.T) {
	lat, st := heartbeatsUnderBulk(t, false, 64)
	if st.Dropped != 0 {
		t.Fatalf("%d messages dropped", st.Dropped)
	}
	p50, p99, mx := percentiles(lat)
	t.Logf("heartbeat latency with 64 MiB of appends flowing, %d heartbeats: p50 %v, p99 %v, max %v", len(lat), p50, p99, mx)
}

// heartbeatsUnderBulk sends mib 1 MiB appends from one node to another,
// keeping 12 in flight (the bulk queue full but never over), and a
// heartbeat every millisecond until they are all received; it returns the
// heartbeats' latencies and the sender's stats. single puts everything
// on one connection: the control.
func heartbeatsUnderBulk(t testing.TB, single bool, mib int) ([]time.Duration, Stats) {
	c := newCluster(t, clusterOpts{n: 2, tune: func(cfg *Config) { cfg.singleStream = single }})
	a, b := c.nodes[0], c.nodes[1]
	c.connected(t)
	defer c.close()
	b.onRecv = func(r recv) bool {
		r.m.Entries = nil // counted, not kept
		return true
	}
	big := bytes.Repeat([]byte("x"), 1<<20)
	var sentAt []time.Time
	hbDone := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(hbDone)
		// Time is the point: a heartbeat a millisecond samples the
		// latency while the appends flow.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := uint64(0); ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			sentAt = append(sentAt, time.Now())
			a.tr.Group(1).Send([]*pb.Message{msg(pb.MsgHeartbeat, a, b, i, nil)})
		}
	}()
	apps := func() int {
		n := 0
		for _, r := range b.got {
			if r.m.GetType() == pb.MsgApp {
				n++
			}
		}
		return n
	}
	const window = 12
	for i := range mib {
		if i >= window {
			b.await(t, "appends received", func() bool { return apps() > i-window })
		}
		a.tr.Group(2).Send([]*pb.Message{msg(pb.MsgApp, a, b, uint64(i), big)})
	}
	b.await(t, "every append received", func() bool { return apps() == mib })
	close(stop)
	<-hbDone
	b.await(t, "every heartbeat received", func() bool { return len(b.got)-mib == len(sentAt) })
	b.mu.Lock()
	defer b.mu.Unlock()
	var lat []time.Duration
	for _, r := range b.got {
		if r.m.GetType() == pb.MsgHeartbeat {
			lat = append(lat, r.at.Sub(sentAt[r.m.GetCommit()]))
		}
	}
	return lat, a.tr.Stats()
}

func percentiles(d []time.Duration) (p50, p99, max time.Duration) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(d)
	return d[len(d)/2], d[len(d)*99/100], d[len(d)-1]
}

// A peer that stops is reported down and unreachable, messages to it are
// dropped; when it starts again on its address, the peer reconnects and
// messages flow both ways.
func TestPeerRestartReconnects(t *testing.T) {
	c := newCluster(t, clusterOpts{n: 2})
	a, b := c.nodes[0], c.nodes[1]
	c.connected(t)
	b.tr.Close()
	a.awaitUp(t, "n2", false)
	// Dropped at once if its stream knows the peer is down, or when the
	// stream learns it; reported either way.
	a.tr.Group(7).Send([]*pb.Message{msg(pb.MsgHeartbeat, a, b, 1, nil)})
	a.await(t, "group 7 reports n2 unreachable", func() bool { return a.unreach[[2]uint64{7, b.id}] > 0 })

	c.restart(t, b)
	a.awaitUp(t, "n2", true)
	b.awaitUp(t, "n1", true)
	a.tr.Group(7).Send([]*pb.Message{msg(pb.MsgHeartbeat, a, b, 2, nil)})
	b.tr.Group(7).Send([]*pb.Message{msg(pb.MsgHeartbeat, b, a, 3, nil)})
	b.awaitMarker(t, 7, 2)
	a.awaitMarker(t, 7, 3)
	if st := a.tr.Stats(); st.Connects < 4 || st.Disconnects < 2 {
		t.Fatalf("stats after a reconnect: %+v", st)
	}
}

// A MsgSnap written to its connection is reported sent, and arrives;
// one that cannot be sent is reported failed.
func TestSnapshotReported(t *testing.T) {
	c := newCluster(t, clusterOpts{n: 2})
	a, b := c.nodes[0], c.nodes[1]
	c.connected(t)
	snap := func(marker uint64) *pb.Message {
		m := msg(pb.MsgSnap, a, b, marker, nil)
		m.Snapshot = &pb.Snapshot{Data: bytes.Repeat([]byte("s"), 100<<10), Metadata: &pb.SnapshotMetadata{Index: new(uint64(5)), Term: new(uint64(1))}}
		return m
	}
	a.tr.Group(4).Send([]*pb.Message{snap(1)})
	b.awaitMarker(t, 4, 1)
	a.await(t, "the snapshot reported sent", func() bool { return slices.Equal(a.snaps[[2]uint64{4, b.id}], []bool{true}) })
	b.tr.Close()
	// Both streams down (each logs after it stopped taking messages).
	a.log.await(t, "lost the connection to a peer", `peer="n2"`, `stream="bulk"`)
	a.log.await(t, "lost the connection to a peer", `peer="n2"`, `stream="small"`)
	a.tr.Group(4).Send([]*pb.Message{snap(2)})
	a.await(t, "the snapshot reported failed", func() bool { return slices.Equal(a.snaps[[2]uint64{4, b.id}], []bool{true, false}) })
}

// A frame larger than the receiver's bound closes that connection, with a
// log line, and no other: the sender's small stream and a third node keep
// delivering, and the sender's bulk stream reconnects.
func TestOversizedFrameClosesOnlyItsConnection(t *testing.T) {
	c := newCluster(t, clusterOpts{n: 3, tune: func(cfg *Config) {
		if cfg.Name == "n2" {
			cfg.MaxFrameSize = 64 << 10
		}
	}})
	a, b, third := c.nodes[0], c.nodes[1], c.nodes[2]
	c.connected(t)
	a.tr.Group(1).Send([]*pb.Message{msg(pb.MsgApp, a, b, 1, make([]byte, 128<<10))})
	b.log.await(t, "closed an inter-node connection for a bad frame", `peer="n1"`, `stream="bulk"`, "frame too large")
	a.tr.Group(1).Send([]*pb.Message{msg(pb.MsgHeartbeat, a, b, 2, nil)})
	third.tr.Group(1).Send([]*pb.Message{msg(pb.MsgApp, third, b, 3, make([]byte, 1<<10))})
	b.awaitMarker(t, 1, 2)
	b.awaitMarker(t, 1, 3)
	// The bulk stream from n1 was closed and is redialled.
	a.log.awaitN(t, 2, "connected to a peer", `peer="n2"`, `stream="bulk"`)
	a.tr.Group(1).Send([]*pb.Message{msg(pb.MsgApp, a, b, 4, make([]byte, 1<<10))})
	b.awaitMarker(t, 1, 4)
	if st := b.tr.Stats(); st.ProtocolErrors != 1 || b.receivedMarker(1, 1) != 0 {
		t.Fatalf("n2: %+v, oversized received %d", st, b.receivedMarker(1, 1))
	}
}

// A frame whose length claims 200 MiB (under the bound) followed by one
// byte costs its reader a chunk (1 MiB), not 200 MiB: measured as the
// bytes the heap allocated while the read ran to the end of the bytes.
func TestLyingFrameLengthAllocatesLittle(t *testing.T) {
	frame := appendHeader(nil, frameMsg, 1, 200<<20)
	frame = append(frame, 0)
	fr := frameReader{r: bytes.NewReader(frame)}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	_, _, _, err := fr.read(256<<20, nil)
	runtime.ReadMemStats(&ms)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read: %v", err)
	}
	if grown := ms.TotalAlloc - before; grown > 2<<20 {
		t.Fatalf("a 200 MiB frame header made the reader allocate %d KiB", grown>>10)
	}
}

// rawHandshake sends h on conn and reads the answer, which must be a
// welcome.
func rawHandshake(t *testing.T, conn net.Conn, h hello) {
	t.Helper()
	frame := h.append(appendHeader(nil, frameHello, 0, 0))
	putLength(frame)
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	fr := frameReader{r: conn}
	typ, _, body, err := fr.read(maxHandshakeFrame, nil)
	if err != nil || typ != frameWelcome {
		t.Fatalf("handshake: type %d %q %v", typ, body, err)
	}
}

// A node of another cluster, a name that is no peer, and a node dialling
// an address it believes another node's are refused, with a line on both
// sides saying why; nothing they send is delivered.
func TestHandshakeRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tune    func(*Config)
		because string
	}{
		{"cluster id", func(cfg *Config) { cfg.Cluster = "other" }, `cluster id \"other\" is not this node's cluster \"test\"`},
		{"unknown name", func(cfg *Config) { cfg.Name = "n9" }, `node name \"n9\" is not one of this node's peers`},
		{"meant for another node", func(cfg *Config) {
			for i := range cfg.Peers {
				cfg.Peers[i].Name = map[string]string{"n1": "n1", "n2": "n3", "n3": "n2"}[cfg.Peers[i].Name]
			}
		}, `this node is \"n2\", not \"n3\"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, clusterOpts{n: 3})
			a, b := c.nodes[0], c.nodes[1]
			c.connected(t)
			// n1 restarts misconfigured and dials n2 (at n2's address).
			a.tr.Close()
			ln, err := net.Listen("tcp", a.addr)
			if err != nil {
				t.Fatal(err)
			}
			a.ln = ln
			a.log = newLogRec(t)
			cfg := c.config(a)
			tc.tune(&cfg)
			cfg.Logger = slog.New(a.log)
			tr, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			a.tr = tr
			line := b.log.await(t, "refused an inter-node connection", tc.because)
			a.log.await(t, "cannot connect to a peer", "refused by the peer", tc.because)
			if st := b.tr.Stats(); st.Refused == 0 {
				t.Fatalf("n2: %+v after %s", st, line)
			}
			if !strings.Contains(line, `remote="127.0.0.1:`) {
				t.Fatalf("the refusal does not name the caller: %s", line)
			}
			for _, p := range a.tr.Peers() {
				if p.Name == "n2" && (p.SmallUp || p.BulkUp) {
					t.Fatalf("a refused peer is up: %+v", p)
				}
			}
		})
	}
}

// A message not from the connection's node, or to another node, or of a
// type local to a node, is dropped and counted, not handed on.
func TestForgedMessagesRejected(t *testing.T) {
	c := newCluster(t, clusterOpts{n: 3})
	a, b, third := c.nodes[0], c.nodes[1], c.nodes[2]
	c.connected(t)
	a.tr.Close()
	conn, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rawHandshake(t, conn, hello{version: protocolVersion, stream: streamSmall, id: a.id, cluster: "test", from: "n1", to: "n2"})
	var frames []byte
	for i, m := range []*pb.Message{
		msg(pb.MsgHeartbeat, third, b, 1, nil), // from n3 on n1's connection
		msg(pb.MsgHeartbeat, a, third, 2, nil), // to n3
		msg(pb.MsgUnreachable, a, b, 3, nil),   // local to a node
		msg(pb.MsgHeartbeat, a, b, 4, nil),     // fine
	} {
		frame := appendHeader(nil, frameMsg, uint64(i), 0)
		frame = appendMarshal(t, frame, m)
		putLength(frame)
		frames = append(frames, frame...)
	}
	if _, err := conn.Write(frames); err != nil {
		t.Fatal(err)
	}
	b.awaitMarker(t, 3, 4)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.got) != 1 || b.tr.Stats().Rejected != 3 {
		t.Fatalf("received %d, stats %+v", len(b.got), b.tr.Stats())
	}
}

// Bad configurations fail New with a clear error.
func TestNewRefusesBadConfig(t *testing.T) {
	base := Config{Cluster: "c", Name: "n1", ID: 1, Listen: "127.0.0.1:0", Handler: func(uint64, *pb.Message) {}}
	for _, tc := range []struct {
		tune func(*Config)
		want string
	}{
		{func(c *Config) { c.ID = 0 }, "Raft id cannot be 0"},
		{func(c *Config) { c.Handler = nil }, "Handler is required"},
		{func(c *Config) { c.Cluster = "" }, "cluster id"},
		{func(c *Config) { c.Peers = []Peer{{Name: "n2", Addr: "x:1"}, {Name: "n2", Addr: "y:1"}} }, "listed twice"},
		{func(c *Config) { c.Peers = []Peer{{Name: "n2", Addr: "x:1", ID: 1}} }, "this node's Raft id"},
		{func(c *Config) { c.Listen = "256.0.0.1:0" }, "listen on"},
	} {
		cfg := base
		tc.tune(&cfg)
		tr, err := New(cfg)
		if err == nil {
			tr.Close()
			t.Errorf("%s: New succeeded", tc.want)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %q, want %q", err, tc.want)
		}
	}
}

// A hello and a welcome round-trip; bytes that are neither fail to decode
// without a panic.
func FuzzHandshake(f *testing.F) {
	f.Add(uint64(1), "c", "n1", "n2", "", "", []byte{})
	f.Add(uint64(1<<63), "", strings.Repeat("n", 300), "x", "", "", []byte{1, 2})
	f.Add(uint64(2), "c", "n1", "n2", "amqp", "192.0.2.1:5672", []byte{1, 3, 2, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, id uint64, cluster, from, to, service, client string, junk []byte) {
		h := hello{version: protocolVersion, stream: streamBulk, id: id, cluster: cluster, from: from, to: to}
		if service != "" {
			// A client connection stream's hello carries two more fields.
			h.stream, h.service, h.client = streamConn, service, client
		}
		got, err := decodeHello(h.append(nil))
		if err != nil || got != h {
			t.Fatalf("%+v decodes to %+v, %v", h, got, err)
		}
		w := welcome{id: id, name: from}
		if gw, err := decodeWelcome(w.append(nil)); err != nil || gw != w {
			t.Fatalf("%+v decodes to %+v, %v", w, gw, err)
		}
		_, _ = decodeHello(junk)
		_, _ = decodeWelcome(junk)
	})
}

// A frame reader reads what was framed, and refuses lengths over its
// bound or under a header's without reading the body.
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte{0, 0, 0, 9, 4, 0, 0, 0, 0, 0, 0, 0, 1}, 16)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 4}, 1<<20)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max < 0 {
			max = -max
		}
		max %= 1 << 22
		fr := frameReader{r: bytes.NewReader(data)}
		for {
			_, _, body, err := fr.read(max, nil)
			if err != nil {
				return
			}
			if len(body) > max {
				t.Fatalf("a body of %d bytes over a bound of %d", len(body), max)
			}
		}
	})
}

func TestFrameRoundTrip(t *testing.T) {
	var stream []byte
	for i := range 5 {
		f := appendHeader(nil, frameMsg, uint64(i)<<40, 0)
		f = append(f, bytes.Repeat([]byte{byte(i)}, i*700_000)...)
		putLength(f)
		stream = append(stream, f...)
	}
	fr := frameReader{r: bytes.NewReader(stream)}
	for i := range 5 {
		typ, group, body, err := fr.read(4<<20, nil)
		if err != nil || typ != frameMsg || group != uint64(i)<<40 || len(body) != i*700_000 || (i > 0 && body[len(body)-1] != byte(i)) {
			t.Fatalf("frame %d: %d %d %d %v", i, typ, group, len(body), err)
		}
	}
	if _, _, _, err := fr.read(1, nil); err == nil {
		t.Fatal("read past the end")
	}
	short := binary.BigEndian.AppendUint32(nil, 3)
	if _, _, _, err := (&frameReader{r: bytes.NewReader(append(short, make([]byte, 12)...))}).read(10, nil); err == nil {
		t.Fatal("a length shorter than a header was read")
	}
}
