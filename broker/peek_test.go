// Tests of peeking at a queue's messages without changing it.

package broker_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// A paged durable queue of 20 messages (window 4) is peeked in pages of
// 5 from the head, from each page's next seq and across the paged middle;
// afterwards a consumer gets all 20 in order, none redelivered.
func TestPeekPagesWithoutChangingTheQueue(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("pq", nil, brokertest.Durable)
	const n = 20
	for i := range n {
		ch.Publish("", "pq", amqp091.Publishing{Body: []byte(fmt.Sprintf("m%d", i)), DeliveryMode: amqp091.Persistent})
	}
	var got []string
	var from uint64
	for page := 0; ; page++ {
		ms, err := b.Broker.Peek("/", "pq", from, 6)
		if err != nil {
			t.Fatalf("peek: %v", err)
		}
		take := ms
		if len(ms) > 5 {
			take = ms[:5]
		}
		for _, m := range take {
			if m.Redelivered {
				t.Fatalf("peeked %q redelivered", m.Body)
			}
			got = append(got, string(m.Body))
		}
		if len(ms) <= 5 {
			break
		}
		from = ms[5].Seq
	}
	for i := range n {
		if i >= len(got) || got[i] != fmt.Sprintf("m%d", i) {
			t.Fatalf("peeked %v, want m0..m%d in order", got, n-1)
		}
	}
	if len(got) != n {
		t.Fatalf("peeked %d messages, want %d", len(got), n)
	}
	// Peeking again from the middle of the queue gives the same messages.
	mid, err := b.Broker.Peek("/", "pq", 0, 12)
	if err != nil || len(mid) != 12 || string(mid[11].Body) != "m11" {
		t.Fatalf("peek 12: %d messages, err %v", len(mid), err)
	}
	deliveries, err := ch.Consume("pq", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		d := <-deliveries
		if string(d.Body) != fmt.Sprintf("m%d", i) || d.Redelivered {
			t.Fatalf("delivery %d: %q redelivered=%v", i, d.Body, d.Redelivered)
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
}

// A priority queue is peeked high priority first, FIFO within a level.
func TestPeekPriorityOrder(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("prio", amqp091.Table{"x-max-priority": int32(5)}, brokertest.Durable)
	var want []string
	for p := range 3 {
		for i := range 6 {
			body := fmt.Sprintf("p%d-%d", p, i)
			if !ch.PublishAck("", "prio", amqp091.Publishing{Body: []byte(body), DeliveryMode: amqp091.Persistent, Priority: uint8(p)}) {
				t.Fatal("nacked")
			}
		}
	}
	for p := 2; p >= 0; p-- {
		for i := range 6 {
			want = append(want, fmt.Sprintf("p%d-%d", p, i))
		}
	}
	ms, err := b.Broker.Peek("/", "prio", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != len(want) {
		t.Fatalf("peeked %d, want %d", len(ms), len(want))
	}
	for i, m := range ms {
		if string(m.Body) != want[i] || m.Priority != uint8(2-i/6) {
			t.Fatalf("peek %d: %q prio %d, want %q", i, m.Body, m.Priority, want[i])
		}
	}
}

func TestPeekUnknownQueue(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for _, c := range [][2]string{{"/", "nope"}, {"/nope", "q"}} {
		if _, err := b.Broker.Peek(c[0], c[1], 0, 1); !errors.Is(err, broker.ErrNotFound) {
			t.Fatalf("peek %v: %v, want ErrNotFound", c, err)
		}
	}
}

// Pages of a priority queue follow delivery order exactly when each
// starts at the previous page's next (priority level, seq): messages of
// the levels are published interleaved (their seqs interleave too), and a
// window of 2 keeps most of each level paged out.
func TestPeekLevelPagesPriorityQueue(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{PageWindow: 2}})
	ch := b.Session(t)
	if _, err := ch.QueueDeclare("prio", true, false, false, false, amqp091.Table{"x-max-priority": 3}); err != nil {
		t.Fatal(err)
	}
	byPrio := map[int][]string{}
	for i := range 30 {
		p := i % 3
		body := fmt.Sprintf("p%d-%d", p, i)
		byPrio[p] = append(byPrio[p], body)
		if !ch.PublishAck("", "prio", amqp091.Publishing{Body: []byte(body), DeliveryMode: amqp091.Persistent, Priority: uint8(p)}) {
			t.Fatal("nacked")
		}
	}
	want := append(append(byPrio[2], byPrio[1]...), byPrio[0]...)
	var got []string
	prio, from := uint8(3), uint64(0)
	for page := 0; ; page++ {
		if page > 30 {
			t.Fatalf("no end after 30 pages: %v", got)
		}
		ms, err := b.Broker.PeekLevel("/", "prio", prio, from, 5) // 4 and the next page's start
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range ms {
			if i == 4 {
				prio, from = m.Priority, m.Seq
				break
			}
			got = append(got, string(m.Body))
		}
		if len(ms) < 5 {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages:\n%v\nwant\n%v", got, want)
	}
}
