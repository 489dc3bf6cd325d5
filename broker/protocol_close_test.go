// Tests of closing connections and channels, and of broker shutdown.

package broker_test

// Tests of closing: the connection.close and channel.close handshakes,
// closes while the client is still writing, the bound on lingering after
// close-ok, and broker shutdown with connections open or mid-handshake.

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func TestConnectionCloseHandshake(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	r.send(0, &amqp.ConnectionClose{ReplyCode: 200, ReplyText: "bye"})
	rawExpect[*amqp.ConnectionCloseOk](r, 0)
	r.expectHangup(prWait)

	c := b.Dial(t)
	if err := c.Close(); err != nil {
		t.Fatalf("amqp091 close: %v", err)
	}
}

// prFlood returns publishes to the default exchange adding up to more than
// the socket buffers of both ends can hold, so that a client writing them
// is still writing when the server closes.
func prFlood(ch uint16, key string) []byte {
	body := bytes.Repeat([]byte("x"), 100_000)
	var b []byte
	for len(b) < 16<<20 {
		b = amqp.AppendMethodFrame(b, ch, &amqp.BasicPublish{RoutingKey: key})
		b = amqp.AppendHeaderFrame(b, ch, 60, uint64(len(body)), rawEmptyProps)
		b = amqp.AppendBodyFrames(b, ch, body, 131072)
	}
	return b
}

// writeAsync writes b from another goroutine and reports the result.
func (r *rawConn) writeAsync(b []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		r.nc.SetWriteDeadline(time.Now().Add(4 * rawWait))
		_, err := r.nc.Write(b)
		done <- err
	}()
	return done
}

// expectEOF checks that the next read finds the end of the stream (the
// server's FIN), not a reset and not more data.
func (r *rawConn) expectEOF() {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(rawWait))
	n, err := r.fr.ReadFrame()
	if !errors.Is(err, io.EOF) {
		r.t.Fatalf("after the close: frame type %d, err %v; want end of stream", n.Type, err)
	}
}

// A client that sends connection.close ahead of more frames (amqplib
// sends close while publishes are still queued) reads close-ok and then a
// clean end of stream, not a reset, and everything it writes is taken in
// and discarded: nothing after the close is executed.
func TestConnectionCloseWhileClientWrites(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	if _, err := ch.QueueDeclare("after-close", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	wrote := r.writeAsync(prCat(amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionClose{ReplyCode: 200, ReplyText: "bye"}), prFlood(1, "after-close")))
	rawExpect[*amqp.ConnectionCloseOk](r, 0)
	r.expectEOF()
	if err := <-wrote; err != nil {
		t.Fatalf("writing after connection.close: %v (the server reset the connection)", err)
	}
	q, err := ch.QueueDeclarePassive("after-close", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 0 {
		t.Fatalf("%d publishes sent after connection.close were executed", q.Messages)
	}
}

// After a frame error the server cannot parse the rest of the stream, but
// a client still writing reads the connection.close and a clean end of
// stream, not a reset.
func TestServerCloseWhileClientWrites(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	wrote := r.writeAsync(prCat(prFrame(9, 1, bytes.Repeat([]byte{0xff}, 100)), prFlood(1, "nowhere")))
	cl := rawExpect[*amqp.ConnectionClose](r, 0)
	if cl.ReplyCode != amqp.FrameError {
		t.Fatalf("connection.close %d %q, want 501", cl.ReplyCode, cl.ReplyText)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("writing after the server's connection.close: %v (the server reset the connection)", err)
	}
	r.expectEOF()
}

// A client that never hangs up after close-ok is let go after CloseLinger:
// a shutdown waits for no more than that.
func TestCloseLingerBounded(t *testing.T) {
	const linger = 300 * time.Millisecond
	b := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{CloseLinger: linger}})
	r := dialRawOpen(t, b.Addr)
	// Timed from before the close is sent: the server's linger starts
	// when it sends close-ok, which may be before this reads it.
	closed := time.Now()
	r.send(0, &amqp.ConnectionClose{ReplyCode: 200})
	rawExpect[*amqp.ConnectionCloseOk](r, 0)
	r.expectEOF()
	// r keeps its socket open. The shutdown waits for the linger, which
	// ends on its own, well before the shutdown's own deadline.
	b.Stop()
	if took := time.Since(closed); took < linger {
		t.Fatalf("the server let go %v after close-ok, before the %v linger", took, linger)
	} else if took > prWait {
		t.Fatalf("the server let go %v after close-ok; the linger is %v", took, linger)
	}
}

func TestChannelCloseAndReopen(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	r.send(1, &amqp.ChannelClose{ReplyCode: 200, ReplyText: "done"})
	rawExpect[*amqp.ChannelCloseOk](r, 1)
	r.openChannel(1)
	r.send(1, &amqp.QueueDeclare{Queue: "reopened", Exclusive: true})
	if ok := rawExpect[*amqp.QueueDeclareOk](r, 1); ok.Queue != "reopened" {
		t.Fatalf("declare-ok for %q", ok.Queue)
	}
}

func TestShutdownForcesClose(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, _ := b.Channel(t)
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)

	stopped := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		b.Stop()
		stopped <- time.Since(start)
	}()
	cl := r.expectConnectionClose(amqp.ConnectionForced)
	if !strings.HasPrefix(cl.ReplyText, "CONNECTION_FORCED - ") {
		t.Errorf("raw close text %q", cl.ReplyText)
	}
	e := prAwaitClose(t, closed, "connection")
	prWantCode(t, e, amqp091.ConnectionForced, "CONNECTION_FORCED - broker forced connection closure")
	select {
	case took := <-stopped:
		// Both clients answered close-ok, so the server did not wait for
		// its close timeout.
		if took > 2*time.Second {
			t.Errorf("shutdown took %v", took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("shutdown did not finish")
	}
}

// Shutdown does not wait out the close timeout for connections still in
// the handshake: one that answers close-ok is let go at once, one that has
// not even sent the protocol header (a TCP health check, a port scan) is
// hung up on without an AMQP frame it could not read.
func TestShutdownMidHandshake(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	mid := dialRaw(t, b.Addr)
	mid.start()
	mute := dialRaw(t, b.Addr)
	// The server must have accepted mute before Stop: a later connection
	// that gets through its handshake proves the accept loop got there.
	probe := dialRawOpen(t, b.Addr)
	probe.send(0, &amqp.ConnectionClose{ReplyCode: 200})
	rawExpect[*amqp.ConnectionCloseOk](probe, 0)
	// Hang up, as a client does after close-ok: the server would otherwise
	// keep the socket for its close linger.
	probe.expectEOF()
	probe.nc.Close()

	stopped := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		b.Stop()
		stopped <- time.Since(start)
	}()
	mid.expectConnectionClose(amqp.ConnectionForced)
	if got, _ := mute.drain(prWait); len(got) != 0 {
		t.Errorf("a client that never sent the protocol header got %q", got)
	}
	select {
	case took := <-stopped:
		if took > time.Second {
			t.Errorf("shutdown took %v, want well under the 3s close timeout", took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("shutdown did not finish")
	}
}
