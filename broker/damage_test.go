// Tests of damaged store blocks: they cost only their own messages.

package broker_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/diskstore"
)

// damagingBackend is a disk store whose Reopen flips a byte in the middle
// of every segment file while the store is closed: a damaged segment
// block.
type damagingBackend struct{}

func (damagingBackend) Name() string { return "disk-damaged-on-reopen" }

func (damagingBackend) options() diskstore.Options {
	return diskstore.Options{Logger: slog.New(slog.DiscardHandler)}
}

func (b damagingBackend) Open(t testing.TB) store.Store {
	s, err := diskstore.Open(t.TempDir(), b.options())
	if err != nil {
		t.Fatalf("open disk store: %v", err)
	}
	return s
}

func (b damagingBackend) Reopen(t testing.TB, s store.Store) store.Store {
	ds := s.(*diskstore.Store)
	if err := ds.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	segs, err := filepath.Glob(filepath.Join(ds.Dir(), "segments", "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segment to damage: %v %v", segs, err)
	}
	for _, p := range segs {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0x08
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := diskstore.Open(ds.Dir(), b.options())
	if err != nil {
		t.Fatalf("reopen disk store: %v", err)
	}
	return n
}

// damageBody is message i's body: 2 KiB naming i.
func damageBody(i int) []byte {
	tag := fmt.Sprintf("[message %05d]", i)
	return bytes.Repeat([]byte(tag), 2048/len(tag))
}

// TestDamagedSegmentBlockCostsOnlyItsMessages: a flipped byte in a segment
// block. The broker serves every other message of the queue, takes the
// damaged block's messages out of it as a counted loss (queue and broker
// counters, not left in the ready count), and keeps taking persistent
// publishes: the store did not fail, no alarm. A queue with a dead letter
// exchange whose damaged entries have headers of their own (dead-lettered
// copies) dead-letters them with reason damaged and an empty body.
func TestDamagedSegmentBlockCostsOnlyItsMessages(t *testing.T) {
	const n = 300
	for _, withDLX := range []bool{false, true} {
		t.Run(fmt.Sprintf("dlx=%v", withDLX), func(t *testing.T) {
			inst := brokertest.Start(t, brokertest.Config{Backend: damagingBackend{}})
			ch := inst.Session(t)
			queue := "work"
			if withDLX {
				// Messages reach "retry" as dead-lettered copies
				// (their rewritten properties are kept with their
				// entries); "retry" dead-letters to "lost".
				ch.Declare("lost", nil, brokertest.Durable)
				ch.Declare("retry", tlDLX("lost", nil), brokertest.Durable)
				ch.Declare("src", tlDLX("retry", nil), brokertest.Durable)
				queue = "retry"
			} else {
				ch.Declare("work", nil, brokertest.Durable)
			}
			first := queue
			if withDLX {
				first = "src"
			}
			for i := range n {
				p := amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: damageBody(i), Headers: amqp091.Table{"id": int32(i)}}
				if !ch.PublishAck("", first, p) {
					t.Fatalf("publish %d nacked", i)
				}
			}
			if withDLX {
				for i := range n {
					m, ok, err := ch.Channel.Get("src", false)
					if err != nil || !ok {
						t.Fatalf("get %d from src: %v %v", i, ok, err)
					}
					if err := m.Reject(false); err != nil {
						t.Fatal(err)
					}
				}
				tlEventuallyReady(t, inst, "retry", n)
			}
			inst.Restart() // the store checkpoints into segments; the backend damages them
			ch = inst.Session(t)

			got := map[int]bool{}
			for {
				m, ok, err := ch.Channel.Get(queue, true)
				if err != nil {
					t.Fatalf("get: %v", err)
				}
				if !ok {
					break
				}
				id := int(m.Headers["id"].(int32))
				if got[id] || !bytes.Equal(m.Body, damageBody(id)) {
					t.Fatalf("message %d delivered twice or with a wrong body", id)
				}
				got[id] = true
			}
			qi, err := inst.Broker.Queue("/", queue)
			if err != nil {
				t.Fatal(err)
			}
			lost := n - len(got)
			if lost == 0 || len(got) == 0 {
				t.Fatalf("%d of %d messages delivered: the damage should cost some, not all", len(got), n)
			}
			if qi.Damaged != uint64(lost) || qi.Ready != 0 || inst.Broker.Stats().Damaged != uint64(lost) {
				t.Fatalf("queue counts %d damaged, %d ready; broker %d; want %d lost, 0 ready",
					qi.Damaged, qi.Ready, inst.Broker.Stats().Damaged, lost)
			}
			if a := inst.Broker.Alarms(); len(a) != 0 {
				t.Fatalf("alarms %v after damage: the store must not fail", a)
			}
			if !ch.PublishAck("", queue, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("after")}) {
				t.Fatal("a persistent publish after the damage was nacked")
			}
			if !withDLX {
				return
			}
			// The lost ones reached "lost": properties, no body,
			// x-death reason damaged.
			var dead []int
			for {
				m, ok, err := ch.Channel.Get("lost", true)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				id := int(m.Headers["id"].(int32))
				if len(m.Body) != 0 || got[id] {
					t.Fatalf("dead letter %d: %d bytes of body, delivered already %v", id, len(m.Body), got[id])
				}
				deaths, _ := m.Headers["x-death"].([]any)
				if len(deaths) == 0 || deaths[0].(amqp091.Table)["reason"] != "damaged" || deaths[0].(amqp091.Table)["queue"] != "retry" {
					t.Fatalf("dead letter %d: x-death %v, want reason damaged from retry first", id, deaths)
				}
				dead = append(dead, id)
			}
			if len(dead) != lost {
				t.Fatalf("%d dead letters with reason damaged, want %d", len(dead), lost)
			}
		})
	}
}

// TestDamagedBacklogCostsOnlyItsMessages: dead letters waiting for a route
// (at-least-once) in a damaged segment block. When a route appears, the
// retry forwards every other one and takes the damaged ones out of the
// backlog as a counted loss; the store does not fail.
func TestDamagedBacklogCostsOnlyItsMessages(t *testing.T) {
	const n = 300
	inst := brokertest.Start(t, brokertest.Config{Backend: damagingBackend{}})
	ch := inst.Session(t)
	if err := ch.ExchangeDeclare("dlx", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch.Declare("src", tlDLX("dlq", amqp091.Table{
		"x-dead-letter-exchange": "dlx", "x-dead-letter-strategy": "at-least-once"}), brokertest.Durable)
	for i := range n {
		p := amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: damageBody(i), Headers: amqp091.Table{"id": int32(i)}}
		if !ch.PublishAck("", "src", p) {
			t.Fatalf("publish %d nacked", i)
		}
	}
	for i := range n {
		m, ok, err := ch.Channel.Get("src", false)
		if err != nil || !ok {
			t.Fatalf("get %d: %v %v", i, ok, err)
		}
		if err := m.Reject(false); err != nil {
			t.Fatal(err)
		}
	}
	brokertest.Eventually(t, "the backlog to hold every dead letter", func() bool {
		st, _ := inst.Broker.QueueStats("/", "src")
		return st.DeadLetterBacklog == n
	})
	inst.Restart() // into segments, then damaged
	ch = inst.Session(t)
	ch.Declare("dlq", nil, brokertest.Durable)
	ch.Bind("dlq", "dlq", "dlx", nil) // a route: the backlog is retried
	brokertest.Eventually(t, "the backlog to empty", func() bool {
		st, _ := inst.Broker.QueueStats("/", "src")
		return st.DeadLetterBacklog == 0
	})
	qi, err := inst.Broker.Queue("/", "src")
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for {
		m, ok, err := ch.Channel.Get("dlq", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if id := int(m.Headers["id"].(int32)); !bytes.Equal(m.Body, damageBody(id)) {
			t.Fatalf("dead letter %d has a wrong body", id)
		}
		got++
	}
	if got+int(qi.Damaged) != n || qi.Damaged == 0 {
		t.Fatalf("%d dead letters forwarded, %d lost to damage, of %d", got, qi.Damaged, n)
	}
	if a := inst.Broker.Alarms(); len(a) != 0 {
		t.Fatalf("alarms %v: the store must not fail", a)
	}
}
