package broker

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/diskstore"
	"github.com/brokerd/brokerd/store/memstore"
	"github.com/brokerd/brokerd/wal"
)

// discardOut is a ChannelOut that drops every frame but passes on the
// delivery tags, so the benchmark can ack (a delivery from a durable queue
// may wait for its delivered mark to be written, so it can come from a
// store goroutine after the publish returned), and whether each basic.get
// found a message.
type discardOut struct {
	tags chan uint64
	gets chan bool
}

func (o *discardOut) Send(m amqp.Method) {
	if _, ok := m.(*amqp.BasicGetEmpty); ok {
		o.gets <- false
	}
}
func (o *discardOut) SendContent(m amqp.Method, props, body []byte) {
	switch d := m.(type) {
	case *amqp.BasicDeliver:
		o.tags <- d.DeliveryTag
	case *amqp.BasicGetOk:
		o.gets <- true
	}
}
func (o *discardOut) Writable() bool    { return true }
func (o *discardOut) Close(*amqp.Error) {}
func (o *discardOut) Saturated() bool   { return false }
func (o *discardOut) Later(fn func())   { fn() }

// benchChannel opens a broker over a memory store and one channel on it,
// with a queue q declared (durable if durable).
func benchChannel(b testing.TB, durable bool, args amqp.Table) (*Broker, *channel, *discardOut) {
	return benchChannelOn(b, memstore.New(), durable, args)
}

// benchDiskStore opens a disk store in a temporary directory that syncs
// nothing (the benchmarks measure CPU and allocations, not the disk).
func benchDiskStore(b testing.TB) store.Store {
	st, err := diskstore.Open(b.TempDir(), diskstore.Options{Sync: wal.SyncNone, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() }) // after the broker's Close: cleanups run last first
	return st
}

// benchChannelOn is benchChannel over st.
func benchChannelOn(b testing.TB, st store.Store, durable bool, args amqp.Table) (*Broker, *channel, *discardOut) {
	br, err := Open(Options{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(br.Close)
	v := br.VHost("/")
	c := &conn{b: br, vhost: v, userName: "guest", channels: map[uint16]*channel{}}
	c.user.Store(br.users["guest"])
	c.perm.Store(br.perms[permKey{user: "guest", vhost: "/"}])
	out := &discardOut{tags: make(chan uint64, 16), gets: make(chan bool, 1)}
	ch := newChannel(c, 1, out)
	if err := ch.Handle(&amqp.QueueDeclare{Queue: "q", Durable: durable, Arguments: args}); err != nil {
		b.Fatal(err)
	}
	return br, ch, out
}

// BenchmarkPublishDeliverAck measures the broker's own work per message,
// without sockets or a client: publish to the default exchange, route,
// enqueue, deliver to a consumer, ack. Sub-benchmarks by body size and
// whether the message is persistent in a durable queue, over the memory
// store or the disk store (syncing nothing: the CPU and allocations only).
func BenchmarkPublishDeliverAck(b *testing.B) {
	for _, size := range []int{128, 1024} {
		for _, kind := range []string{"transient", "persistent", "persistent-disk"} {
			persistent := kind != "transient"
			b.Run(fmt.Sprintf("size=%d/%s", size, kind), func(b *testing.B) {
				var st store.Store = memstore.New()
				if kind == "persistent-disk" {
					st = benchDiskStore(b)
				}
				_, ch, out := benchChannelOn(b, st, persistent, nil)
				if err := ch.Handle(&amqp.BasicConsume{Queue: "q", ConsumerTag: "c"}); err != nil {
					b.Fatal(err)
				}
				props := amqp.Properties{Flags: amqp.FlagDeliveryMode, DeliveryMode: 1}
				if persistent {
					props.DeliveryMode = 2
				}
				raw, err := props.Append(nil)
				if err != nil {
					b.Fatal(err)
				}
				pub := &amqp.BasicPublish{RoutingKey: "q"}
				body := make([]byte, size)
				// One ack reused, as pub is: decoding a frame into a
				// method is the codec's work (amqp's benchmarks), not the
				// broker's.
				ack := &amqp.BasicAck{}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					p := props
					if err := ch.Publish(pub, &p, raw, body); err != nil {
						b.Fatal(err)
					}
					ack.DeliveryTag = <-out.tags
					if err := ch.Handle(ack); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// Allocations per message on the publish → deliver → ack path, as
// BenchmarkPublishDeliverAck makes them: a regression guard (the issue's
// target is 4; lower the bounds as the path gets leaner, never raise
// them). AllocsPerRun counts every goroutine's allocations: a store's or
// timer's work for the message counts too. The memory store's own
// allocations (a record and an entry per message) make its persistent
// figure the highest; the disk store is the one persistent messages use
// in production.
func TestPublishDeliverAckAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts: not with -short")
	}
	if raceEnabled {
		t.Skip("allocation counts: not under the race detector, whose sync.Pool drops objects at random")
	}
	for _, c := range []struct {
		persistent, disk bool
		max              float64
	}{{false, false, 2}, {true, false, 11}, {true, true, 3}} {
		var st store.Store = memstore.New()
		if c.disk {
			st = benchDiskStore(t)
		}
		_, ch, out := benchChannelOn(t, st, c.persistent, nil)
		if err := ch.Handle(&amqp.BasicConsume{Queue: "q", ConsumerTag: "c"}); err != nil {
			t.Fatal(err)
		}
		props := amqp.Properties{Flags: amqp.FlagDeliveryMode, DeliveryMode: 1}
		if c.persistent {
			props.DeliveryMode = 2
		}
		raw, err := props.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		pub := &amqp.BasicPublish{RoutingKey: "q"}
		body := make([]byte, 1024)
		ack := &amqp.BasicAck{}
		got := testing.AllocsPerRun(2000, func() {
			p := props
			if err := ch.Publish(pub, &p, raw, body); err != nil {
				t.Fatal(err)
			}
			ack.DeliveryTag = <-out.tags
			if err := ch.Handle(ack); err != nil {
				t.Fatal(err)
			}
		})
		if got > c.max {
			t.Errorf("persistent=%t disk=%t: %.1f allocations per message, want at most %.0f", c.persistent, c.disk, got, c.max)
		}
		t.Logf("persistent=%t disk=%t: %.1f allocations per message", c.persistent, c.disk, got)
	}
}

// BenchmarkRejectDeadLetter measures dead-lettering: publish, deliver,
// reject without requeue into a DLQ (x-death rewrite, routing, one store
// operation), then take the dead letter from the DLQ.
func BenchmarkRejectDeadLetter(b *testing.B) {
	for _, kind := range []string{"transient", "persistent", "persistent-disk"} {
		persistent := kind != "transient"
		b.Run(kind, func(b *testing.B) {
			var st store.Store = memstore.New()
			if kind == "persistent-disk" {
				st = benchDiskStore(b)
			}
			br, ch, out := benchChannelOn(b, st, persistent, amqp.Table{{Key: "x-dead-letter-exchange", Value: ""}, {Key: "x-dead-letter-routing-key", Value: "dlq"}})
			if err := ch.Handle(&amqp.QueueDeclare{Queue: "dlq", Durable: persistent}); err != nil {
				b.Fatal(err)
			}
			if err := ch.Handle(&amqp.BasicConsume{Queue: "q", ConsumerTag: "c"}); err != nil {
				b.Fatal(err)
			}
			props := amqp.Properties{Flags: amqp.FlagDeliveryMode, DeliveryMode: 1}
			if persistent {
				props.DeliveryMode = 2
			}
			raw, _ := props.Append(nil)
			pub := &amqp.BasicPublish{RoutingKey: "q"}
			body := make([]byte, 1024)
			b.SetBytes(1024)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := props
				if err := ch.Publish(pub, &p, raw, body); err != nil {
					b.Fatal(err)
				}
				if err := ch.Handle(&amqp.BasicReject{DeliveryTag: <-out.tags}); err != nil {
					b.Fatal(err)
				}
				for got := false; !got; got = <-out.gets {
					if err := ch.Handle(&amqp.BasicGet{Queue: "dlq", NoAck: true}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			if st := br.Stats(); st.DeadLettered["rejected"] != uint64(b.N) {
				b.Fatalf("dead-lettered %d of %d", st.DeadLettered["rejected"], b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
