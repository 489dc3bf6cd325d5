package gate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/brokerd/brokerd/amqp"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// spliceTo is a forward that proxies each connection to addr, as cluster
// mode's proxies to the leader (over a transport stream there).
func spliceTo(addr string) func(net.Conn) {
	return func(c net.Conn) {
		d, err := net.Dial("tcp", addr)
		if err != nil {
			c.Close()
			return
		}
		_ = Splice(c, d)
	}
}

func newSplicingGate(t *testing.T, to string) *Gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := New(ln, spliceTo(to))
	t.Cleanup(func() { g.Close() })
	return g
}

// An http.Server serves a gate's virtual listener, Shutdown switches the
// gate back to forwarding (here spliced to another server), and a new
// http.Server serves it again after another Open.
func TestHTTPServerOverVirtualListener(t *testing.T) {
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "leader") }))
	defer leader.Close()
	g := newSplicingGate(t, leader.Listener.Addr().String())
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func(want string) {
		t.Helper()
		resp, err := client.Get("http://" + g.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != want {
			t.Fatalf("GET: %q, %v; want %q", b, err, want)
		}
	}
	get("leader")
	for _, name := range []string{"here", "here again"} {
		l, err := g.Open()
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, name) })}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(l) }()
		get(name)
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Fatalf("Serve: %v", err)
		}
		get("leader")
	}
}

// amqpHandler accepts guest/guest and opens no channels: enough for a
// client's connection handshake.
type amqpHandler struct{}

func (amqpHandler) Authenticate(user, password string, _ net.Addr) error {
	if user != "guest" || password != "guest" {
		return errors.New("wrong login")
	}
	return nil
}

func (amqpHandler) OpenConnection(*amqp.ServerConn, string, string) (amqp.Session, *amqp.Error) {
	return amqpSession{}, nil
}

type amqpSession struct{}

func (amqpSession) OpenChannel(uint16, amqp.ChannelOut) (amqp.ChannelHandler, *amqp.Error) {
	return nil, amqp.Errorf(amqp.NotAllowed, "no channels in this test")
}
func (amqpSession) Drained() {}
func (amqpSession) Closed()  {}

func newAMQPServer(product string) *amqp.Server {
	return amqp.NewServer(amqp.ServerConfig{
		Handler: amqpHandler{}, Product: product,
		Logger: slog.New(slog.DiscardHandler), LoginFailureDelay: -1,
	})
}

// An amqp.Server serves a gate's virtual listener and, once Shutdown,
// the gate forwards (spliced to the leader's gate, whose server answers);
// after another Open a new amqp.Server serves it again. Which server
// answered is its product property, as a real client sees it.
func TestAMQPServerOverVirtualListener(t *testing.T) {
	lln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	leaderGate := New(lln, func(c net.Conn) { c.Close() })
	defer leaderGate.Close()
	ll, err := leaderGate.Open()
	if err != nil {
		t.Fatal(err)
	}
	leader := newAMQPServer("leader")
	leaderDone := make(chan error, 1)
	go func() { leaderDone <- leader.Serve(ll) }()
	defer func() {
		leader.Shutdown(context.Background())
		<-leaderDone
	}()

	g := newSplicingGate(t, lln.Addr().String())
	connect := func(want string) {
		t.Helper()
		conn, err := amqp091.Dial("amqp://guest:guest@" + g.Addr().String() + "/")
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer conn.Close()
		if got := conn.Properties["product"]; got != want {
			t.Fatalf("served by %v, want %s", got, want)
		}
	}
	connect("leader")
	for _, name := range []string{"here", "here again"} {
		l, err := g.Open()
		if err != nil {
			t.Fatal(err)
		}
		srv := newAMQPServer(name)
		served := make(chan error, 1)
		go func() { served <- srv.Serve(l) }()
		connect(name)
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := <-served; !errors.Is(err, amqp.ErrServerClosed) {
			t.Fatalf("Serve: %v", err)
		}
		connect("leader")
	}
}
