package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// accepted is a client connection stream OnConn was given.
type accepted struct {
	service string
	conn    net.Conn
}

// acceptConns makes tune's nodes named in names take client connection
// streams, each sent on the node's channel (buffered: OnConn never waits
// for the test).
func acceptConns(names ...string) (map[string]chan accepted, func(*Config)) {
	chans := map[string]chan accepted{}
	for _, n := range names {
		chans[n] = make(chan accepted, 16)
	}
	return chans, func(cfg *Config) {
		if ch := chans[cfg.Name]; ch != nil {
			cfg.OnConn = func(service string, conn net.Conn) { ch <- accepted{service, conn} }
		}
	}
}

func next(t *testing.T, ch <-chan accepted) accepted {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(waitFor):
		t.Fatalf("no client stream accepted in %v", waitFor)
		return accepted{}
	}
}

// pattern is n bytes that differ with seed and position.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// roundTrip sends up (dialler → acceptor) then half-closes, the acceptor
// reads it to EOF, then sends down and half-closes, and the dialler reads
// that to EOF: both directions carry their bytes, and a side that
// half-closed still reads.
func roundTrip(t *testing.T, dialled, acc net.Conn, up, down []byte) {
	t.Helper()
	// A bound, so that a lost end fails rather than hangs.
	for _, c := range []net.Conn{dialled, acc} {
		if err := c.SetDeadline(time.Now().Add(waitFor)); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan []byte, 1)
	errc := make(chan error, 2)
	go func() {
		b, err := io.ReadAll(acc)
		if err != nil {
			errc <- err
			return
		}
		got <- b
		if _, err := acc.Write(down); err != nil {
			errc <- err
			return
		}
		errc <- acc.(interface{ CloseWrite() error }).CloseWrite()
	}()
	if _, err := dialled.Write(up); err != nil {
		t.Fatal(err)
	}
	if err := dialled.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	back, err := io.ReadAll(dialled)
	if err != nil {
		t.Fatalf("read the acceptor's bytes: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("acceptor: %v", err)
	}
	if b := <-got; !bytes.Equal(b, up) {
		t.Fatalf("the acceptor read %d bytes, not the %d sent", len(b), len(up))
	}
	if !bytes.Equal(back, down) {
		t.Fatalf("the dialler read %d bytes, not the %d sent", len(back), len(down))
	}
}

// A client connection stream carries bytes both ways through
// DialConn/OnConn, half-closes each way, shows the original client as
// its remote address, and its deadlines work.
func TestConnStreamRoundTrip(t *testing.T) {
	chans, accept := acceptConns("n2")
	c := newCluster(t, clusterOpts{n: 2, tune: func(cfg *Config) { cfg.MaxFrameSize = 64 << 10; accept(cfg) }})
	a, b := c.nodes[0], c.nodes[1]
	client := &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 4242}
	dialled, err := a.tr.DialConn(context.Background(), "n2", "amqp", client)
	if err != nil {
		t.Fatal(err)
	}
	defer dialled.Close()
	acc := next(t, chans["n2"])
	defer acc.conn.Close()
	if acc.service != "amqp" {
		t.Errorf("service %q, want amqp", acc.service)
	}
	if _, ok := acc.conn.RemoteAddr().(*net.TCPAddr); !ok {
		t.Errorf("RemoteAddr is a %T, want *net.TCPAddr (a loopback-only user's check asserts it)", acc.conn.RemoteAddr())
	}
	if ra := acc.conn.RemoteAddr(); ra.String() != "203.0.113.7:4242" || ra.Network() != "tcp" {
		t.Errorf("the acceptor's RemoteAddr is %s %q, want the client's", ra.Network(), ra)
	}
	if ra := dialled.RemoteAddr(); ra.String() != b.addr {
		t.Errorf("the dialler's RemoteAddr is %q, want n2's %s", ra, b.addr)
	}

	// Deadlines: a read with nothing to read times out (time is the
	// point: the deadline is what is tested), both sides, and the conn
	// still works after the deadline is cleared.
	for _, conn := range []net.Conn{dialled, acc.conn} {
		if err := conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		var ne net.Error
		if _, err := conn.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("a read past its deadline: %v, want a timeout", err)
		}
		if err := conn.SetReadDeadline(time.Time{}); err != nil {
			t.Fatal(err)
		}
	}

	// More than any frame or socket buffer, both ways, with no frame
	// bound: 8 MiB up against a 64 KiB MaxFrameSize would fail if framed.
	roundTrip(t, dialled, acc.conn, pattern(8<<20, 1), pattern(3<<20+17, 2))
	if st := a.tr.Stats(); st.ConnsDialled != 1 {
		t.Errorf("n1: %+v", st)
	}
	if st := b.tr.Stats(); st.ConnsAccepted != 1 || st.Refused != 0 {
		t.Errorf("n2: %+v", st)
	}

	// Without a client address, the acceptor sees the dialling node's.
	d2, err := a.tr.DialConn(context.Background(), "n2", "http", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	acc2 := next(t, chans["n2"])
	defer acc2.conn.Close()
	if acc2.service != "http" || acc2.conn.RemoteAddr().String() != d2.LocalAddr().String() {
		t.Errorf("service %q, remote %s; want http from %s", acc2.service, acc2.conn.RemoteAddr(), d2.LocalAddr())
	}
}

// A node without OnConn refuses client streams, saying why on both sides;
// so does a node to a caller not among its peers. DialConn refuses a peer
// name it does not know, and a bad service name, without dialling.
func TestConnStreamRefused(t *testing.T) {
	c := newCluster(t, clusterOpts{n: 2})
	a, b := c.nodes[0], c.nodes[1]
	_, err := a.tr.DialConn(context.Background(), "n2", "amqp", nil)
	if err == nil || !containsAll(err.Error(), []string{"peer n2", "refused by the peer", "this node takes no client connection streams"}) {
		t.Fatalf("DialConn to a node without OnConn: %v", err)
	}
	b.log.await(t, "refused an inter-node connection", "this node takes no client connection streams")

	for _, tc := range []struct{ peer, service, want string }{
		{"n9", "amqp", "peer n9: not one of this node's peers"},
		{"n1", "amqp", "peer n1: not one of this node's peers"}, // itself
		{"n2", "", "service name of 0 bytes"},
		{"n2", strings.Repeat("s", 33), "service name of 33 bytes"},
	} {
		if _, err := a.tr.DialConn(context.Background(), tc.peer, tc.service, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DialConn(%q, %q): %v, want %q", tc.peer, tc.service, err, tc.want)
		}
	}

	// A node that takes client streams still refuses a caller that is not
	// its peer.
	chans, tune := acceptConns("n2")
	c2 := newCluster(t, clusterOpts{n: 2, tune: tune})
	b2 := c2.nodes[1]
	conn, err := net.Dial("tcp", b2.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	frame := hello{version: protocolVersion, stream: streamConn, id: 9, cluster: "test", from: "n9", to: "n2", service: "amqp", client: "198.51.100.1:1"}.append(appendHeader(nil, frameHello, 0, 0))
	putLength(frame)
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	typ, _, body, err := (&frameReader{r: conn}).read(maxHandshakeFrame, nil)
	if err != nil || typ != frameRefuse || !strings.Contains(string(body), `node name "n9" is not one of this node's peers`) {
		t.Fatalf("a client stream from a stranger: type %d %q %v", typ, body, err)
	}
	b2.log.await(t, "refused an inter-node connection", `node name \"n9\"`)
	select {
	case acc := <-chans["n2"]:
		acc.conn.Close()
		t.Fatal("a refused stream reached OnConn")
	default:
	}
}

// DialConn gives up when its context ends during the handshake, with the
// context's error.
func TestDialConnContext(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts (the kernel does) and never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	tr, err := New(Config{
		Cluster: "test", Name: "n1", ID: 1, Listen: "127.0.0.1:0", Handler: func(uint64, *pb.Message) {},
		Peers: []Peer{{Name: "n2", Addr: silent.Addr().String()}}, HandshakeTimeout: time.Minute,
		Logger: slog.New(newLogRec(t)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := tr.DialConn(ctx, "n2", "amqp", nil); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "peer n2") {
		t.Fatalf("DialConn past its context's deadline: %v", err)
	}
}

// With mutual TLS a client stream carries bytes both ways and half-closes
// (close_notify), and the original client's address arrives.
func TestConnStreamTLS(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	configs := map[string]*tls.Config{"n1": ca.nodeTLS(t, "n1", ca), "n2": ca.nodeTLS(t, "n2", ca)}
	chans, accept := acceptConns("n2")
	c := newCluster(t, clusterOpts{n: 2, tune: func(cfg *Config) { cfg.TLS = configs[cfg.Name]; accept(cfg) }})
	a := c.nodes[0]
	dialled, err := a.tr.DialConn(context.Background(), "n2", "http", &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	defer dialled.Close()
	if _, ok := dialled.(*clientConn).Conn.(*tls.Conn); !ok {
		t.Fatalf("the stream is not TLS: %T", dialled.(*clientConn).Conn)
	}
	acc := next(t, chans["n2"])
	defer acc.conn.Close()
	if got := acc.conn.RemoteAddr().String(); got != "[2001:db8::1]:80" {
		t.Errorf("RemoteAddr %q", got)
	}
	roundTrip(t, dialled, acc.conn, pattern(1<<20, 3), pattern(100_000, 4))
}

// Transport.Close closes the client streams it accepted and those it
// dialled: the other ends read the end, nothing leaks (goleak).
func TestCloseEndsConnStreams(t *testing.T) {
	chans, tune := acceptConns("n1", "n2")
	c := newCluster(t, clusterOpts{n: 2, tune: tune})
	a, b := c.nodes[0], c.nodes[1]
	toB, err := a.tr.DialConn(context.Background(), "n2", "amqp", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer toB.Close()
	atB := next(t, chans["n2"])
	defer atB.conn.Close()
	toA, err := b.tr.DialConn(context.Background(), "n1", "amqp", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer toA.Close()
	atA := next(t, chans["n1"])
	defer atA.conn.Close()

	// n2 closes: the stream it accepted and the one it dialled end, on
	// its side (reads fail) and on n1's (reads see the end).
	for _, conn := range []net.Conn{toB, atB.conn, toA, atA.conn} {
		if err := conn.SetReadDeadline(time.Now().Add(waitFor)); err != nil {
			t.Fatal(err)
		}
	}
	b.tr.Close()
	for name, conn := range map[string]net.Conn{"accepted by n2": atB.conn, "dialled by n2": toA} {
		if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s, read after Close: %v, want net.ErrClosed", name, err)
		}
	}
	for name, conn := range map[string]net.Conn{"dialled to n2": toB, "accepted from n2": atA.conn} {
		if _, err := io.ReadAll(conn); err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
			t.Errorf("%s, read after n2's Close: %v", name, err)
		}
	}
}

// isReset reports whether err is a connection reset, which a closed
// connection with unread bytes may cause.
func isReset(err error) bool { return strings.Contains(err.Error(), "connection reset") }
