// Tests of outbound flow control: a client that does not read stops its own reader.

package broker_test

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// A publisher that does not read its socket: its mandatory unroutable
// publishes come back as basic.return with their bodies and pile up in its
// outbound queue (issue 8, defect 8: nothing bounded it). brokerd stops
// reading the client once the queue holds its hard limit (32 MiB): of the
// 256 MiB the client tries to send, brokerd takes in what fills the queue,
// the write in progress and the sockets' buffers, then nothing more. Once
// the client reads, every return arrives, body intact, and the rest of its
// publishes are taken.
func TestUnreadReturnsStopTheReader(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	const size, n = 64 << 10, 4096 // 256 MiB of publishes
	body := make([]byte, size)
	binary.BigEndian.PutUint64(body, 0x0123456789abcdef)
	pub := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "nowhere", Mandatory: true})
	pub = amqp.AppendHeaderFrame(pub, 1, 60, size, rawEmptyProps)
	pub = amqp.AppendBodyFrames(pub, 1, body, 128<<10)

	var sent atomic.Int64
	done := make(chan error, 1)
	go func() {
		for range n {
			r.nc.SetWriteDeadline(time.Now().Add(time.Minute))
			if _, err := r.nc.Write(pub); err != nil {
				done <- err
				return
			}
			sent.Add(1)
		}
		done <- nil
	}()

	// Nothing signals that the reader stopped: wait until the broker has
	// taken no publish for half a second (time is the point here).
	published := func() uint64 { return b.Broker.Stats().Published }
	var last uint64
	for still, start := 0, time.Now(); still < 5; {
		time.Sleep(100 * time.Millisecond) // time is the point: the publisher must stay stalled
		p := published()
		if p >= n {
			t.Fatalf("brokerd took all %d publishes (%d MiB) while the client read none of their returns", p, p*size>>20)
		}
		if p == last {
			still++
		} else {
			still, last = 0, p
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("publishes still being taken after 30 s: %d", p)
		}
	}
	if held := last * size; held > 96<<20 {
		t.Fatalf("brokerd took %d publishes (%d MiB) before it stopped reading, want under 96 MiB", last, held>>20)
	}
	t.Logf("brokerd stopped reading after %d publishes (%d MiB); the client had written %d", last, last*size>>20, sent.Load())

	// The client reads: every publish is returned with its body.
	returned := 0
	for returned < n {
		f, err := r.next(30 * time.Second)
		if err != nil {
			t.Fatalf("after %d returns: %v", returned, err)
		}
		switch f.Type {
		case amqp.FrameMethod:
			m, err := amqp.DecodeMethod(f.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := m.(*amqp.BasicReturn); !ok {
				t.Fatalf("got %s, want basic.return", m.Name())
			}
			returned++
		case amqp.FrameBody:
			if len(f.Payload) >= 8 && binary.BigEndian.Uint64(f.Payload) != 0x0123456789abcdef && binary.BigEndian.Uint64(f.Payload) != 0 {
				t.Fatalf("return %d: body frame corrupted", returned)
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("publishing: %v", err)
	}
	if p := published(); p != n {
		t.Fatalf("%d publishes taken, want %d", p, n)
	}
}

// Direct reply-to replies are pushed into the requester's outbound queue
// by other connections; a requester that does not read would hold them
// all. Once its queue is at the hard limit, replies are refused as
// unroutable: a mandatory one comes back to its publisher (312 NO_ROUTE)
// instead of piling up.
func TestRepliesToARequesterThatDoesNotRead(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	if _, err := ch.QueueDeclare("requests", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// The requester: consumes its reply-to pseudo-queue, sends one
	// request, and then reads nothing.
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	r.send(1, &amqp.BasicConsume{Queue: "amq.rabbitmq.reply-to", ConsumerTag: "rpc", NoAck: true})
	rawExpect[*amqp.BasicConsumeOk](r, 1)
	props := amqp.Properties{Flags: amqp.FlagReplyTo, ReplyTo: "amq.rabbitmq.reply-to"}
	raw, err := props.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	req := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "requests"})
	req = amqp.AppendHeaderFrame(req, 1, 60, 1, raw)
	r.mustWrite(amqp.AppendBodyFrames(req, 1, []byte("?"), 4096))
	r.openChannel(2) // a round trip: the request is in its queue
	d, ok, err := ch.Get("requests", true)
	if !ok || err != nil || d.ReplyTo == "" {
		t.Fatalf("request: ok %v err %v reply-to %q", ok, err, d.ReplyTo)
	}

	// Each reply is confirmed, and its return (if any) comes before the
	// confirm.
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	reply := amqp091.Publishing{Body: make([]byte, 64<<10)}
	const most = 4096 // 256 MiB
	for i := range most {
		dc, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", d.ReplyTo, true, false, reply)
		if err != nil {
			t.Fatal(err)
		}
		if !dc.Wait() {
			t.Fatalf("reply %d nacked", i)
		}
		select {
		case ret := <-returns:
			if ret.ReplyCode != amqp091.NoRoute {
				t.Fatalf("returned with %d %q, want 312 NO_ROUTE", ret.ReplyCode, ret.ReplyText)
			}
			if held := i * len(reply.Body); held > 96<<20 {
				t.Fatalf("first reply refused after %d MiB, want under 96 MiB", held>>20)
			}
			t.Logf("reply %d refused, %d MiB sent to a requester that reads nothing", i, i*len(reply.Body)>>20)
			return
		default:
		}
	}
	t.Fatalf("%d replies of 64 KiB pushed to a requester that reads nothing, none refused", most)
}
