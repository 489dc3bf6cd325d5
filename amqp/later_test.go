package amqp

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// laterHandler answers basic.qos through ChannelOut.Later: the reply is
// formatted by the connection's writer, as publisher confirms are.
type laterHandler struct {
	ran       atomic.Int32 // Later functions run
	afterDead atomic.Int32 // ... of which given after the server closed the channel
}

func (h *laterHandler) Authenticate(string, string, net.Addr) error { return nil }
func (h *laterHandler) OpenConnection(*ServerConn, string, string) (Session, *Error) {
	return laterSession{h}, nil
}

type laterSession struct{ h *laterHandler }

func (s laterSession) OpenChannel(_ uint16, out ChannelOut) (ChannelHandler, *Error) {
	return &laterChannel{h: s.h, out: out}, nil
}
func (laterSession) Drained() {}
func (laterSession) Closed()  {}

type laterChannel struct {
	h   *laterHandler
	out ChannelOut
}

func (c *laterChannel) Handle(m Method) error {
	switch m := m.(type) {
	case *BasicQos:
		if m.PrefetchCount == 13 {
			// Close the channel from the server's side, then ask for
			// a reply: a dead channel's Later is dropped.
			c.out.Close(Errorf(PreconditionFailed, "closed by the test"))
			c.out.Later(func() {
				c.h.afterDead.Add(1)
				c.out.Send(&BasicQosOk{})
			})
			return nil
		}
		c.out.Later(func() {
			c.h.ran.Add(1)
			c.out.Send(&BasicQosOk{})
		})
		return nil
	}
	return Errorf(NotImplemented, "%s", m.Name())
}

func (c *laterChannel) Publish(*BasicPublish, *Properties, []byte, []byte) error { return nil }
func (c *laterChannel) Close()                                                   {}

// TestChannelOutLater: a function given to Later runs on the connection's
// writer and what it sends reaches the client; one given after the server
// closed the channel never runs.
func TestChannelOutLater(t *testing.T) {
	h := &laterHandler{}
	s := NewServer(ServerConfig{Handler: h})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	conn, err := amqp091.Dial("amqp://guest:guest@" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := ch.Qos(1, 0, false); err != nil { // waits for qos-ok, which only Later sends
			t.Fatal(err)
		}
	}
	if got := h.ran.Load(); got != 3 {
		t.Fatalf("%d Later functions ran, want 3", got)
	}

	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := ch.Qos(13, 0, false); err == nil {
		t.Fatal("qos on a channel the server closed succeeded")
	}
	if e := <-closed; e == nil || e.Code != PreconditionFailed {
		t.Fatalf("channel closed with %v, want %d", e, PreconditionFailed)
	}
	// A round trip on the connection after the close: the writer has
	// taken everything queued before it.
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch2.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	if got := h.afterDead.Load(); got != 0 {
		t.Fatalf("a Later given after the channel closed ran %d times", got)
	}
}
