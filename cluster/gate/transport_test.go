package gate

import (
	"context"
	"log/slog"
	"net"
	"testing"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/replica/transport"
	amqp091 "github.com/rabbitmq/amqp091-go"
	pb "go.etcd.io/raft/v3/raftpb"
)

// remoteHandler is amqpHandler, telling each login's remote address.
type remoteHandler struct {
	amqpHandler
	remotes chan string
}

func (h remoteHandler) Authenticate(user, password string, remote net.Addr) error {
	h.remotes <- remote.String()
	return h.amqpHandler.Authenticate(user, password, remote)
}

// The pieces as cluster mode wires them: a follower's gate forwards over
// a client connection stream of the transport (DialConn, Splice), the
// leader's transport injects it into the leader's gate (OnConn, Inject),
// whose amqp.Server serves it and sees the client's own address.
func TestForwardOverTransport(t *testing.T) {
	var lns [2]net.Listener
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
	}
	peers := []transport.Peer{{Name: "n1", Addr: lns[0].Addr().String()}, {Name: "n2", Addr: lns[1].Addr().String()}}
	cln, err := net.Listen("tcp", "127.0.0.1:0") // n2's AMQP port
	if err != nil {
		t.Fatal(err)
	}
	leaderGate := New(cln, func(c net.Conn) { c.Close() })
	defer leaderGate.Close()
	newTransport := func(i int, onConn func(string, net.Conn)) *transport.Transport {
		tr, err := transport.New(transport.Config{
			Cluster: "test", Name: peers[i].Name, ID: uint64(i + 1), Listener: lns[i], Peers: peers,
			Handler: func(uint64, *pb.Message) {}, OnConn: onConn, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	n2 := newTransport(1, func(service string, c net.Conn) {
		if service != "amqp" {
			c.Close()
			return
		}
		leaderGate.Inject(c)
	})
	defer n2.Close()
	n1 := newTransport(0, nil)
	defer n1.Close()

	ll, err := leaderGate.Open()
	if err != nil {
		t.Fatal(err)
	}
	h := remoteHandler{remotes: make(chan string, 1)}
	srv := amqp.NewServer(amqp.ServerConfig{Handler: h, Product: "n2", Logger: slog.New(slog.DiscardHandler), LoginFailureDelay: -1})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ll) }()
	defer func() {
		srv.Shutdown(context.Background())
		<-served
	}()

	fln, err := net.Listen("tcp", "127.0.0.1:0") // n1's AMQP port
	if err != nil {
		t.Fatal(err)
	}
	follower := New(fln, func(c net.Conn) {
		up, err := n1.DialConn(context.Background(), "n2", "amqp", c.RemoteAddr())
		if err != nil {
			c.Close()
			return
		}
		_ = Splice(c, up)
	})
	defer follower.Close()

	var local string
	conn, err := amqp091.DialConfig("amqp://guest:guest@"+fln.Addr().String()+"/", amqp091.Config{
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := net.Dial(network, addr)
			if err == nil {
				local = c.LocalAddr().String()
			}
			return c, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := conn.Properties["product"]; got != "n2" {
		t.Fatalf("served by %v, want n2", got)
	}
	if got := <-h.remotes; got != local {
		t.Fatalf("the leader saw the client at %s, want %s", got, local)
	}
}
