// Tests of content assembly against hostile input: only the bytes that arrived are held.

package broker_test

// Content assembly against hostile input: a content header announces a
// body size, and brokerd must hold only the bytes that actually arrived,
// and only so many of them per connection.

import (
	"runtime"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// startPublish sends basic.publish to queue q and a content header
// announcing size bytes, and no body yet.
func (r *rawConn) startPublish(ch uint16, q string, size uint64) {
	r.t.Helper()
	b := amqp.AppendMethodFrame(nil, ch, &amqp.BasicPublish{RoutingKey: q})
	r.mustWrite(amqp.AppendHeaderFrame(b, ch, 60, size, rawEmptyProps))
}

// bodyFrame sends one body frame.
func (r *rawConn) bodyFrame(ch uint16, payload []byte) {
	r.t.Helper()
	r.mustWrite(amqp.AppendFrame(nil, amqp.Frame{Type: amqp.FrameBody, Channel: ch, Payload: payload}))
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// Headers announcing 1 MiB bodies on 300 channels, with 100 bytes of each
// sent, cost the broker about what was sent, not 300 MiB (defect: it
// reserved min(size, 1 MiB) per channel at the header; 2,047 channels took
// RSS to 1.3 GiB). The bodies then complete and are delivered whole.
func TestUnfinishedBodiesHoldWhatArrived(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	if _, err := ch.QueueDeclare("bodies", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	const channels, size, sent = 300, 1 << 20, 100
	r := dialRawOpen(t, b.Addr)
	for c := uint16(1); c <= channels; c++ {
		r.openChannel(c)
	}
	before := heapInUse()
	part := []byte(strings.Repeat("x", sent))
	for c := uint16(1); c <= channels; c++ {
		r.startPublish(c, "bodies", size)
		r.bodyFrame(c, part)
	}
	r.openChannel(channels + 1) // a round trip: every frame above was read
	grew := int64(heapInUse()) - int64(before)
	if limit := int64(channels * size / 10); grew > limit {
		t.Fatalf("heap grew by %d bytes for %d unfinished bodies of %d bytes sent each, want under %d", grew, channels, sent, limit)
	}
	rest := []byte(strings.Repeat("y", 128<<10-8))
	for c := uint16(1); c <= channels; c++ {
		for left := size - sent; left > 0; left -= len(rest) {
			r.bodyFrame(c, rest[:min(left, len(rest))])
		}
	}
	r.openChannel(channels + 2)
	brokertest.Eventually(t, "every body complete and enqueued", func() bool { return tlReady(t, b, "bodies") == channels })
	d, ok, err := ch.Get("bodies", true)
	if err != nil || !ok || len(d.Body) != size || string(d.Body[:sent+1]) != string(part)+"y" {
		t.Fatalf("get: ok %v err %v, %d bytes", ok, err, len(d.Body))
	}
}

// What a connection's unfinished bodies hold is bounded: past the bound
// the connection is closed with 506 RESOURCE_ERROR and nothing of the
// unfinished messages is enqueued; completed bodies give their room back,
// so publishing message after message never meets the bound.
func TestUnfinishedBodiesBoundedPerConnection(t *testing.T) {
	const limit = 1 << 20
	b := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{MaxMessageSize: limit, MaxUnfinishedContent: limit}})
	_, ch := b.Channel(t)
	if _, err := ch.QueueDeclare("bounded", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}

	// Sequential messages of 80 % of the bound each: the room comes back.
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	for range 5 {
		r.publish(1, "", "bounded", make([]byte, limit*8/10), amqp.FrameMinSize*16)
	}
	r.openChannel(2)
	brokertest.Eventually(t, "5 messages enqueued", func() bool { return tlReady(t, b, "bounded") == 5 })

	// Two 1 MiB bodies sent 100 KiB at a time: the first's buffer has
	// doubled to 800 KiB after 500 KiB; the second's third frame would
	// take its buffer to 400 KiB, 1200 KiB in all.
	part := make([]byte, 100<<10)
	r.openChannel(3)
	r.openChannel(4)
	r.startPublish(3, "bounded", limit)
	for range 5 {
		r.bodyFrame(3, part)
	}
	r.startPublish(4, "bounded", limit)
	for range 2 {
		r.bodyFrame(4, part)
	}
	r.openChannel(5) // a round trip: still open at 1000 KiB
	r.bodyFrame(4, part)
	cl := r.expectConnectionClose(amqp.ResourceError)
	if !strings.Contains(cl.ReplyText, "unfinished message bodies on this connection") {
		t.Fatalf("connection.close text %q", cl.ReplyText)
	}
	if n := tlReady(t, b, "bounded"); n != 5 {
		t.Fatalf("%d messages enqueued, want the 5 complete ones", n)
	}
	// Other connections are unaffected.
	if err := ch.PublishWithContext(t.Context(), "", "bounded", false, false, amqp091.Publishing{Body: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "a publish on another connection", func() bool { return tlReady(t, b, "bounded") == 6 })
}
