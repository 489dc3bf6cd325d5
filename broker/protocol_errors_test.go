// Tests of protocol errors: channel and connection errors, malformed frames.

package broker_test

// Tests of protocol errors: a channel error closes that channel only and
// the server then discards its frames, a hard error closes the
// connection, and malformed or corrupted frames are frame errors that
// leave the server and other connections unharmed.

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func TestChannelErrorIsolated(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch1 := b.Channel(t)
	ch2, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch2.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := ch2.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	closed := ch1.NotifyClose(make(chan *amqp091.Error, 1))
	_, err = ch1.QueueDeclarePassive("missing", false, false, false, false, nil)
	prWantCode(t, prAmqpErr(t, err), amqp091.NotFound, "NOT_FOUND - no queue 'missing' in vhost '/'")
	prWantCode(t, prAwaitClose(t, closed, "channel"), amqp091.NotFound, "no queue 'missing'")

	if c.IsClosed() {
		t.Fatal("a channel error closed the connection")
	}
	if err := ch2.PublishWithContext(context.Background(), "", q.Name, false, false, amqp091.Publishing{Body: []byte("still here")}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-msgs:
		if string(d.Body) != "still here" {
			t.Fatalf("body %q", d.Body)
		}
	case <-time.After(prWait):
		t.Fatal("the other channel got no delivery")
	}
	// A new channel works too.
	ch3, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch3.QueueDeclarePassive(q.Name, false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
}

// After a soft error the server ignores the channel's frames, content
// included, until the client's close-ok; then the number can be reused.
func TestChannelClosingDiscardsFrames(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	r.send(1, &amqp.QueueDeclare{Queue: "discard", Exclusive: true})
	rawExpect[*amqp.QueueDeclareOk](r, 1)
	r.send(1, &amqp.QueueDeclare{Queue: "missing", Passive: true})
	// Sent before the client has seen the close: all discarded.
	r.publish(1, "", "discard", []byte("lost"), 131072)
	r.mustWrite(prFrame(amqp.FrameBody, 1, []byte("stray body")))
	cl := rawExpect[*amqp.ChannelClose](r, 1)
	if cl.ReplyCode != amqp.NotFound || cl.FailingClassID != 50 || cl.FailingMethodID != 10 {
		t.Fatalf("channel.close %d %q for %d.%d, want 404 for queue.declare", cl.ReplyCode, cl.ReplyText, cl.FailingClassID, cl.FailingMethodID)
	}
	r.send(1, &amqp.ChannelCloseOk{})
	r.openChannel(1)
	r.send(1, &amqp.QueueDeclare{Queue: "discard", Passive: true})
	if ok := rawExpect[*amqp.QueueDeclareOk](r, 1); ok.MessageCount != 0 {
		t.Fatalf("%d messages published on a closing channel were enqueued", ok.MessageCount)
	}
	// Both sides closing at once: each answers the other's close.
	r.send(1, &amqp.QueueDeclare{Queue: "missing", Passive: true})
	r.send(1, &amqp.ChannelClose{ReplyCode: 200})
	rawExpect[*amqp.ChannelClose](r, 1)
	r.send(1, &amqp.ChannelCloseOk{})
	rawExpect[*amqp.ChannelCloseOk](r, 1)
	r.openChannel(1)
}

func TestHardErrorClosesConnection(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	by := prNewBystander(t, b)
	c, ch := b.Channel(t)
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	err := ch.ExchangeDeclare("weird", "nosuch", false, false, false, false, nil)
	prWantCode(t, prAmqpErr(t, err), amqp091.CommandInvalid, "unknown exchange type 'nosuch'")
	e := prAwaitClose(t, closed, "connection")
	prWantCode(t, e, amqp091.CommandInvalid, "COMMAND_INVALID - unknown exchange type 'nosuch'")
	if !c.IsClosed() {
		t.Fatal("connection still open after a hard error")
	}
	by.check(t)

	// The close names the failing method.
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	r.send(1, &amqp.ExchangeDeclare{Exchange: "weird", Type: "nosuch"})
	cl := r.expectConnectionClose(amqp.CommandInvalid)
	if cl.FailingClassID != 40 || cl.FailingMethodID != 10 {
		t.Fatalf("close names method %d.%d, want exchange.declare 40.10", cl.FailingClassID, cl.FailingMethodID)
	}
	by.check(t)
}

func prPublishMethod(ch uint16) []byte {
	return amqp.AppendMethodFrame(nil, ch, &amqp.BasicPublish{RoutingKey: "q"})
}

func prHeader(ch, class uint16, size uint64) []byte {
	return amqp.AppendHeaderFrame(nil, ch, class, size, rawEmptyProps)
}

func TestMalformedInput(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	by := prNewBystander(t, b)

	badEnd := amqp.AppendMethodFrame(nil, 1, &amqp.QueueDeclare{Queue: "x"})
	badEnd[len(badEnd)-1] = 0

	badTable := rawMethodPayload(50, 10, []byte{0, 0, 1, 'q', 0})                  // ticket, queue "q", bits
	badTable = append(badTable, 0, 0, 0, 3, 1, 'k', 'Z')                           // table with type 'Z'
	badProps := amqp.AppendHeaderFrame(nil, 1, 60, 0, []byte{0x20, 0, 0, 0, 0, 9}) // headers flag, table cut short

	for _, tc := range []struct {
		name     string
		frameMax uint32 // tune-ok frame_max; 0 keeps the server's
		input    []byte
		code     uint16
		text     string
		class    uint16 // failing class and method in the close, when non-zero
		method   uint16
	}{
		{name: "garbage", input: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), code: amqp.FrameError, text: "unknown frame type 71"},
		{name: "unknown frame type", input: prFrame(4, 0, nil), code: amqp.FrameError, text: "unknown frame type 4"},
		{name: "oversized frame", frameMax: 4096, input: prFrame(amqp.FrameBody, 1, make([]byte, 4089)), code: amqp.FrameError, text: "frame size 4097 exceeds negotiated maximum 4096"},
		{name: "4 GiB frame claim", input: []byte{1, 0, 1, 0xff, 0xff, 0xff, 0xff}, code: amqp.FrameError, text: "exceeds negotiated maximum 131072"},
		{name: "bad frame end", input: badEnd, code: amqp.FrameError, text: "not frame-end"},
		{name: "method on unopened channel", input: amqp.AppendMethodFrame(nil, 7, &amqp.QueueDeclare{Queue: "x"}), code: amqp.ChannelError, text: "expected 'channel.open' on channel 7", class: 50, method: 10},
		{name: "body on unopened channel", input: prFrame(amqp.FrameBody, 7, []byte("x")), code: amqp.ChannelError, text: "expected 'channel.open' on channel 7"},
		{name: "channel above channel_max", input: amqp.AppendMethodFrame(nil, 65535, &amqp.ChannelOpen{}), code: amqp.NotAllowed, text: "channel number 65535 exceeds negotiated channel_max 2047"},
		{name: "second channel.open", input: amqp.AppendMethodFrame(nil, 1, &amqp.ChannelOpen{}), code: amqp.ChannelError, text: "second 'channel.open'", class: 20, method: 10},
		{name: "body without header", input: prFrame(amqp.FrameBody, 1, []byte("body")), code: amqp.UnexpectedFrame, text: "expected method frame"},
		{name: "header without publish", input: prHeader(1, 60, 4), code: amqp.UnexpectedFrame, text: "expected method frame"},
		{name: "method instead of header", input: prCat(prPublishMethod(1), amqp.AppendMethodFrame(nil, 1, &amqp.QueueDeclare{Queue: "x"})), code: amqp.UnexpectedFrame, text: "expected content header"},
		{name: "body instead of header", input: prCat(prPublishMethod(1), prFrame(amqp.FrameBody, 1, []byte("b"))), code: amqp.UnexpectedFrame, text: "expected content header"},
		{name: "header of wrong class", input: prCat(prPublishMethod(1), prHeader(1, 50, 1)), code: amqp.UnexpectedFrame, text: "got one for class 50"},
		{name: "method instead of body", input: prCat(prPublishMethod(1), prHeader(1, 60, 4), amqp.AppendMethodFrame(nil, 1, &amqp.QueueDeclare{Queue: "x"})), code: amqp.UnexpectedFrame, text: "expected content body"},
		{name: "body longer than declared", input: prCat(prPublishMethod(1), prHeader(1, 60, 2), prFrame(amqp.FrameBody, 1, []byte("four"))), code: amqp.FrameError, text: "exceeds the declared size 2"},
		{name: "short content header", input: prCat(prPublishMethod(1), prFrame(amqp.FrameHeader, 1, []byte{0, 60, 0})), code: amqp.FrameError, text: "content header payload"},
		{name: "bad properties", input: prCat(prPublishMethod(1), badProps), code: amqp.FrameError, text: "cannot decode basic properties"},
		{name: "truncated method arguments", input: prFrame(amqp.FrameMethod, 1, rawMethodPayload(50, 10, []byte{0, 0, 9, 'a'})), code: amqp.FrameError, text: "cannot decode queue.declare", class: 50, method: 10},
		{name: "method payload without ids", input: prFrame(amqp.FrameMethod, 1, []byte{0, 50}), code: amqp.FrameError, text: "too short"},
		{name: "malformed field table", input: prFrame(amqp.FrameMethod, 1, badTable), code: amqp.FrameError, text: "cannot decode queue.declare", class: 50, method: 10},
		{name: "unknown method", input: prFrame(amqp.FrameMethod, 1, rawMethodPayload(60, 99, nil)), code: amqp.CommandInvalid, text: "unknown method class 60 method 99", class: 60, method: 99},
		{name: "unknown class", input: prFrame(amqp.FrameMethod, 1, rawMethodPayload(99, 1, nil)), code: amqp.CommandInvalid, text: "unknown method class 99 method 1", class: 99, method: 1},
		{name: "server method from client", input: amqp.AppendMethodFrame(nil, 1, &amqp.BasicDeliver{ConsumerTag: "x", DeliveryTag: 1}), code: amqp.CommandInvalid, text: "not allowed from a client", class: 60, method: 60},
		{name: "channel method on channel 0", input: amqp.AppendMethodFrame(nil, 0, &amqp.QueueDeclare{Queue: "x"}), code: amqp.CommandInvalid, text: "on channel 0", class: 50, method: 10},
		{name: "content frame on channel 0", input: prFrame(amqp.FrameBody, 0, []byte("x")), code: amqp.UnexpectedFrame, text: "channel 0"},
		{name: "heartbeat on channel 1", input: prFrame(amqp.FrameHeartbeat, 1, nil), code: amqp.FrameError, text: "heartbeat frame on channel 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, b.Addr)
			r.handshake(rawOpts{TuneOk: func(tu amqp.ConnectionTune) amqp.ConnectionTuneOk {
				fm := tu.FrameMax
				if tc.frameMax != 0 {
					fm = tc.frameMax
				}
				return amqp.ConnectionTuneOk{ChannelMax: tu.ChannelMax, FrameMax: fm}
			}})
			r.openChannel(1)
			r.mustWrite(tc.input)
			cl := r.expectConnectionClose(tc.code)
			if !strings.Contains(cl.ReplyText, tc.text) {
				t.Errorf("reply text %q, want it to contain %q", cl.ReplyText, tc.text)
			}
			if tc.class != 0 && (cl.FailingClassID != tc.class || cl.FailingMethodID != tc.method) {
				t.Errorf("close names method %d.%d, want %d.%d", cl.FailingClassID, cl.FailingMethodID, tc.class, tc.method)
			}
			by.check(t)
		})
	}
}

// Garbage in place of the handshake's methods is a frame error too.
func TestMalformedHandshake(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	by := prNewBystander(t, b)
	t.Run("garbage start-ok", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.start()
		r.mustWrite([]byte("\x01\x00\x00\x00\x00\x00\x02\x00\x0a\x00"))
		r.expectConnectionClose(amqp.FrameError)
	})
	t.Run("open before tune-ok", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.start()
		r.startOk(rawOpts{})
		rawExpect[*amqp.ConnectionTune](r, 0)
		r.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
		cl := r.expectConnectionClose(amqp.CommandInvalid)
		if !strings.Contains(cl.ReplyText, "expected 'connection.tune-ok'") {
			t.Fatalf("reply text %q", cl.ReplyText)
		}
	})
	t.Run("oversized start-ok", func(t *testing.T) {
		// Before tune the server accepts frames up to 8192 bytes only.
		r := dialRaw(t, b.Addr)
		r.start()
		r.mustWrite(prFrame(amqp.FrameMethod, 0, make([]byte, 9000)))
		r.expectConnectionClose(amqp.FrameError)
	})
	t.Run("unknown mechanism", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.start()
		r.startOk(rawOpts{Mechanism: "EXTERNAL"})
		r.expectConnectionClose(amqp.CommandInvalid)
	})
	by.check(t)
}

// Randomly corrupted frame streams: whatever the server makes of them, it
// ends the connection (or keeps serving it) without crashing and without
// touching other connections.
func TestCorruptedStreams(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	by := prNewBystander(t, b)
	valid := prCat(
		amqp.AppendMethodFrame(nil, 1, &amqp.QueueDeclare{Queue: "fuzz", Arguments: amqp.Table{{Key: "x-max-length", Value: int32(10)}}}),
		amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "fuzz"}),
		amqp.AppendHeaderFrame(nil, 1, 60, 5, []byte{0x10, 0, 2}), // delivery-mode 2
		prFrame(amqp.FrameBody, 1, []byte("hello")),
		amqp.AppendMethodFrame(nil, 1, &amqp.BasicGet{Queue: "fuzz", NoAck: true}),
		amqp.AppendMethodFrame(nil, 1, &amqp.QueueDelete{Queue: "fuzz"}),
	)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		in := bytes.Clone(valid)
		for range 1 + rng.IntN(4) {
			in[rng.IntN(len(in))] = byte(rng.IntN(256))
		}
		r := dialRawOpen(t, b.Addr)
		r.openChannel(1)
		if err := r.write(in); err != nil {
			t.Fatalf("case %d: write: %v", i, err)
		}
		// End of input: the server must then finish the connection.
		r.nc.(*net.TCPConn).CloseWrite()
		r.expectHangup(prWait)
	}
	by.check(t)
}
