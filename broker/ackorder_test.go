package broker_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/internal/brokertest"
	"github.com/brokerd/brokerd/store"
)

// applyLog records the batches a store applies, in order.
type applyLog struct {
	store.Store
	mu      sync.Mutex
	batches []store.Batch
	changed chan struct{}
}

func (l *applyLog) Apply(b *store.Batch, done func(error)) {
	l.mu.Lock()
	l.batches = append(l.batches, b.Clone())
	l.mu.Unlock()
	l.Store.Apply(b, done)
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// AfterGroup passes the broker's confirm coalescing through, when the
// store wrapped has it.
func (l *applyLog) AfterGroup(fn func()) {
	if g, ok := l.Store.(interface{ AfterGroup(func()) }); ok {
		g.AfterGroup(fn)
		return
	}
	fn()
}

// index returns the position of the first batch applied that satisfies
// match, waiting for it.
func (l *applyLog) index(t *testing.T, what string, match func(*store.Batch) bool) int {
	t.Helper()
	deadline := time.After(dvWait)
	for {
		l.mu.Lock()
		i := slices.IndexFunc(l.batches, func(b store.Batch) bool { return match(&b) })
		l.mu.Unlock()
		if i >= 0 {
			return i
		}
		select {
		case <-l.changed:
		case <-deadline:
			t.Fatalf("no batch applied with %s", what)
		}
	}
}

// An ack and a publish sent after it, in one write, are applied in that
// order, whether the publish is on the ack's channel or another: the
// publish may be confirmed as soon as its record is durable, and a crash
// must then not bring the acked message back (SPEC §6: an ack followed by
// a confirmed publish is never undone). Acks are settled in bursts; the
// publish used to overtake the burst's acks.
func TestAckSettledBeforeLaterPublish(t *testing.T) {
	for _, pubCh := range []uint16{1, 2} {
		t.Run(fmt.Sprintf("publish on channel %d", pubCh), func(t *testing.T) {
			log := &applyLog{changed: make(chan struct{}, 1)}
			b := brokertest.Start(t, brokertest.Config{WrapStore: func(s store.Store) store.Store { log.Store = s; return log }})
			r := dialRawOpen(t, b.Addr)
			r.openChannel(1)
			r.openChannel(2)
			for _, q := range []string{"acked", "published"} {
				r.send(1, &amqp.QueueDeclare{Queue: q, Durable: true})
				rawExpect[*amqp.QueueDeclareOk](r, 1)
			}
			persistent := amqp.Properties{Flags: amqp.FlagDeliveryMode, DeliveryMode: 2}
			props, err := persistent.Append(nil)
			if err != nil {
				t.Fatal(err)
			}
			publish := func(ch uint16, key, body string) []byte {
				f := amqp.AppendMethodFrame(nil, ch, &amqp.BasicPublish{RoutingKey: key})
				f = amqp.AppendHeaderFrame(f, ch, 60, uint64(len(body)), props)
				return amqp.AppendBodyFrames(f, ch, []byte(body), 4096)
			}
			r.mustWrite(publish(1, "acked", "to be acked"))
			r.send(1, &amqp.BasicConsume{Queue: "acked", ConsumerTag: "c"})
			rawExpect[*amqp.BasicConsumeOk](r, 1)
			d := rawExpect[*amqp.BasicDeliver](r, 1)
			r.frame() // header
			r.frame() // body

			// The ack and the publish in one write: one burst.
			w := amqp.AppendMethodFrame(nil, 1, &amqp.BasicAck{DeliveryTag: d.DeliveryTag})
			w = append(w, publish(pubCh, "published", "after the ack")...)
			r.mustWrite(w)

			ack := log.index(t, "the ack's delete", func(b *store.Batch) bool { return len(b.Deletes) > 0 })
			pub := log.index(t, "the later publish", func(b *store.Batch) bool {
				return slices.ContainsFunc(b.Messages, func(m *store.Message) bool { return string(m.Body) == "after the ack" })
			})
			if ack > pub {
				t.Fatalf("the publish sent after the ack was applied first (batch %d, the ack's %d)", pub, ack)
			}
		})
	}
}
