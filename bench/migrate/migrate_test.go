package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/brokerd/brokerd/broker/brokertest"
)

// TestMain fails the package if any goroutine outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// migrate runs the command with the test's queues and state and returns
// its exit code and stdout's last line.
func migrate(t *testing.T, url, state string, args ...string) (int, string) {
	t.Helper()
	var out, errs bytes.Buffer
	full := append([]string{args[0], "-url", url, "-state", state, "-queues", "2", "-size", "100"}, args[1:]...)
	code := realMain(full, &out, &errs)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	t.Logf("migrate %s: exit %d; stderr:\n%s", strings.Join(args, " "), code, errs.String())
	return code, lines[len(lines)-1]
}

func checkResultOf(t *testing.T, line string) checkResult {
	t.Helper()
	var r checkResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("check's line %q: %v", line, err)
	}
	return r
}

// fill publishes 400 messages over the 2 queues.
func fill(t *testing.T, b *brokertest.Instance, state string) {
	t.Helper()
	if code, line := migrate(t, b.URL, state, "fill", "-n", "400", "-window", "50"); code != 0 {
		t.Fatalf("fill exited %d: %s", code, line)
	}
}

// The harness's own run, without shovels: fill, two produce runs (the
// second continues the first's numbering, as the producers do when they
// move to brokerd), then check finds every confirmed message once.
func TestFillProduceCheck(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	state := filepath.Join(t.TempDir(), "state.json")
	fill(t, b, state)
	for _, via := range []string{"rabbitmq", "brokerd"} {
		if code, line := migrate(t, b.URL, state, "produce", "-via", via, "-rate", "2000", "-max", "50"); code != 0 {
			t.Fatalf("produce exited %d: %s", code, line)
		}
	}
	l, err := readLedger(state)
	if err != nil {
		t.Fatal(err)
	}
	for q := range 2 {
		live := l.stream(producerLive, q)
		if len(live.Runs) != 2 || live.Runs[0].From != 0 || live.Runs[1].From != live.Runs[0].To || live.Runs[1].To != live.Next {
			t.Fatalf("queue %d: live runs %+v, next %d: the second run must continue the first's numbering", q, live.Runs, live.Next)
		}
		if live.Next != 100 || live.Confirmed.count() != 100 {
			t.Fatalf("queue %d: live next %d, confirmed %v; want 100 published and confirmed, 50 by each run", q, live.Next, live.Confirmed)
		}
		if fill := l.stream(producerFill, q); fill.Confirmed.count() != 200 || fill.Next != 200 {
			t.Fatalf("queue %d: fill confirmed %v next %d, want [0,200)", q, fill.Confirmed, fill.Next)
		}
	}
	if code, _ := migrate(t, b.URL, state, "depth"); code != 0 {
		t.Fatalf("depth exited %d", code)
	}
	code, line := migrate(t, b.URL, state, "check")
	r := checkResultOf(t, line)
	if code != 0 || r.Lost != 0 || r.DuplicatesMarked+r.DuplicatesUnmarked != 0 || r.Strays+r.Altered+r.Misrouted != 0 {
		t.Fatalf("check exited %d: %+v", code, r)
	}
	if r.Confirmed != 400+200 || r.Unique != 600 || r.ViaRabbitMQ != 500 || r.ViaBrokerd != 100 {
		t.Fatalf("check: %+v; want every confirmed message (fill's 400 and the producers') once, from both runs", r)
	}
}

// A producer whose broker crashes reconnects and goes on; what it had
// confirmed is there after the restart.
func TestProduceSurvivesACrash(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	state := filepath.Join(t.TempDir(), "state.json")
	fill(t, b, state)
	l, err := readLedger(state)
	if err != nil {
		t.Fatal(err)
	}
	cfg := pubConfig{url: b.URL, queues: l.Queues, size: 100, via: "brokerd", window: 50, rate: 2000, drain: brokertest.Wait, log: io.Discard}
	stop := make(chan struct{})
	var c counters
	done := make(chan error, 1)
	go func() { done <- publishAll(context.Background(), cfg, l, producerLive, stop, &c) }()
	brokertest.Eventually(t, "100 confirms", func() bool { return c.confirmed.Load() >= 100 })
	b.Crash()
	brokertest.Eventually(t, "both publishers reconnected", func() bool { return c.reconnects.Load() >= 2 })
	after := c.confirmed.Load()
	brokertest.Eventually(t, "100 confirms after the crash", func() bool { return c.confirmed.Load() >= after+100 })
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := l.write(state); err != nil {
		t.Fatal(err)
	}
	code, line := migrate(t, b.URL, state, "check")
	if r := checkResultOf(t, line); code != 0 || r.Lost != 0 || r.Confirmed < 600 {
		t.Fatalf("check exited %d: %+v", code, r)
	}
}

// copyOf returns a publishing identical to what the delivery carried.
func copyOf(d amqp091.Delivery) amqp091.Publishing {
	return amqp091.Publishing{Headers: d.Headers, ContentType: d.ContentType, DeliveryMode: d.DeliveryMode, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body}
}

// The checker fails a run where a confirmed message is missing, a copy
// came twice unmarked, or a message was altered; a copy marked
// redelivered passes.
func TestCheckFindsFailures(t *testing.T) {
	for _, c := range []struct {
		name   string
		break_ func(t *testing.T, ch *amqp091.Channel)
		marker string // -marker-header
		code   int
		want   func(r checkResult) bool
	}{
		{"nothing", func(*testing.T, *amqp091.Channel) {}, "", 0,
			func(r checkResult) bool { return r.Lost == 0 && r.Unique == 400 }},
		{"lost", func(t *testing.T, ch *amqp091.Channel) {
			if d, ok, err := ch.Get("migrate-q1", true); err != nil || !ok {
				t.Fatalf("get: %v %v", ok, err)
			} else if d.MessageId != "q1.fill.0" {
				t.Fatalf("got %s", d.MessageId)
			}
		}, "", 1, func(r checkResult) bool {
			return r.Lost == 1 && r.Queues[1].Lost == 1 && len(r.LostExamples) == 1 && r.LostExamples[0] == "q1.fill.0"
		}},
		{"duplicate", func(t *testing.T, ch *amqp091.Channel) {
			publishCopy(t, ch, "migrate-q0", false, func(*amqp091.Publishing) {})
		}, "", 1, func(r checkResult) bool {
			return r.DuplicatesUnmarked == 1 && r.DuplicatesUnmarkedShovelled == 1 && r.Queues[0].Duplicates == 1 && r.Unique == 400
		}},
		{"duplicate marked by a header", func(t *testing.T, ch *amqp091.Channel) {
			publishCopy(t, ch, "migrate-q0", false, func(p *amqp091.Publishing) { p.Headers["x-test-redelivered"] = true })
		}, "x-test-redelivered", 0, func(r checkResult) bool { return r.DuplicatesMarked == 1 && r.DuplicatesUnmarked == 0 }},
		{"duplicate of one redelivered", func(t *testing.T, ch *amqp091.Channel) {
			publishCopy(t, ch, "migrate-q0", true, func(*amqp091.Publishing) {})
		}, "", 0, func(r checkResult) bool { return r.DuplicatesMarked == 1 && r.DuplicatesUnmarked == 0 }},
		{"altered", func(t *testing.T, ch *amqp091.Channel) {
			d, ok, err := ch.Get("migrate-q0", true)
			if err != nil || !ok {
				t.Fatalf("get: %v %v", ok, err)
			}
			p := copyOf(d)
			p.ContentType = "text/plain"
			if err := ch.PublishWithContext(brokertest.Context(t), "", "migrate-q0", false, false, p); err != nil {
				t.Fatal(err)
			}
		}, "", 1, func(r checkResult) bool { return r.Altered == 1 && r.Lost == 0 }},
		{"misrouted", func(t *testing.T, ch *amqp091.Channel) {
			d, ok, err := ch.Get("migrate-q0", true)
			if err != nil || !ok {
				t.Fatalf("get: %v %v", ok, err)
			}
			if err := ch.PublishWithContext(brokertest.Context(t), "", "migrate-q1", false, false, copyOf(d)); err != nil {
				t.Fatal(err)
			}
		}, "", 1, func(r checkResult) bool { return r.Misrouted == 1 && r.Lost == 0 }},
		{"stray", func(t *testing.T, ch *amqp091.Channel) {
			if err := ch.PublishWithContext(brokertest.Context(t), "", "migrate-q1", false, false, amqp091.Publishing{Body: []byte("hello")}); err != nil {
				t.Fatal(err)
			}
		}, "", 1, func(r checkResult) bool { return r.Strays == 1 && r.Lost == 0 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := brokertest.Start(t, brokertest.Config{})
			state := filepath.Join(t.TempDir(), "state.json")
			fill(t, b, state)
			_, ch := b.Channel(t)
			c.break_(t, ch)
			ch.Close()
			args := []string{"check"}
			if c.marker != "" {
				args = append(args, "-marker-header", c.marker)
			}
			code, line := migrate(t, b.URL, state, args...)
			if r := checkResultOf(t, line); code != c.code || !c.want(r) {
				t.Fatalf("check exited %d (want %d): %+v", code, c.code, r)
			}
		})
	}
}

// publishCopy publishes to queue a copy of its head message, changed by
// edit. The head stays: taken back with redelivered=true if
// markOriginal, else republished as it was (unmarked, at the tail).
func publishCopy(t *testing.T, ch *amqp091.Channel, queue string, markOriginal bool, edit func(*amqp091.Publishing)) {
	t.Helper()
	d, ok, err := ch.Get(queue, !markOriginal)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	p := copyOf(d)
	edit(&p)
	if markOriginal {
		err = d.Nack(false, true)
	} else {
		err = ch.PublishWithContext(brokertest.Context(t), "", queue, false, false, copyOf(d))
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(brokertest.Context(t), "", queue, false, false, p); err != nil {
		t.Fatal(err)
	}
}

// ranges keeps a sorted set of disjoint intervals whatever order the
// numbers come in.
func TestRanges(t *testing.T) {
	var rs ranges
	for _, s := range []uint64{0, 1, 2, 10, 5, 4, 6, 3, 12, 11, 20, 8, 8, 1} {
		rs.add(s)
	}
	if got, want := fmt.Sprint(rs), "[[0 7] [8 9] [10 13] [20 21]]"; got != want {
		t.Fatalf("ranges %s, want %s", got, want)
	}
	if rs.count() != 12 || !rs.has(6) || rs.has(7) || !rs.has(20) || rs.has(21) {
		t.Fatalf("count %d, has(6,7,20,21) wrong: %v", rs.count(), rs)
	}
}
