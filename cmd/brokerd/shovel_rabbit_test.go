package main

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"reflect"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestShovelFromRabbitMQ moves a queue from a real RabbitMQ 3.10 node to
// brokerd with a dynamic shovel (ack-mode on-confirm), as the README's
// "Migrating from RabbitMQ" does, and kills brokerd with SIGKILL halfway:
// 20,000 persistent messages, each with its sequence number, properties
// and headers, wait in a durable queue on RabbitMQ; a producer keeps
// publishing there (with confirms) while the shovel runs, across the kill
// and the restart on the same data directory, where the stored shovel
// starts again by itself. Once RabbitMQ's queue is empty (unacknowledged
// messages included), brokerd's queue holds every message RabbitMQ
// confirmed, with its properties and headers unchanged; a message there
// twice (published to brokerd but not confirmed when it was killed, so
// RabbitMQ delivered it to the shovel again) has its other copies flagged
// redelivered. Then a shovel from brokerd to RabbitMQ moves 4,000
// messages and RabbitMQ is killed with SIGKILL and restarted while it
// does: RabbitMQ ends up with every one, unchanged (a copy there twice is
// not flagged: RabbitMQ knows nothing of brokerd's mark). That kill is
// what tells on-confirm from acking on publish for sure: brokerd writes
// a message to its log (the page cache, which outlives its SIGKILL) so
// soon after taking it that its kill rarely loses one acked on publish
// (one in two runs); RabbitMQ's loses hundreds.
//
// It takes about 30 s under -race. It skips when RabbitMQ (Debian's
// rabbitmq-server, which .ci/run installs without starting the service)
// or Erlang is not installed, or its node does not start within
// rabbitStartTimeout.
func TestShovelFromRabbitMQ(t *testing.T) {
	const (
		backlog = 20_000 // in RabbitMQ before the shovel starts
		extra   = 5_000  // at most, published while the shovel runs
		back    = 4_000  // brokerd to RabbitMQ
	)
	rabbit := startRabbitNode(t)
	rconn, err := amqp091.Dial(rabbit.url)
	if err != nil {
		t.Fatal(err)
	}
	defer rconn.Close()
	pub := newSeqPublisher(t, rconn, "from-rabbit")
	start := time.Now()
	if err := pub.publish(backlog); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d messages published to RabbitMQ in %v", backlog, time.Since(start))

	dir := t.TempDir()
	args := []string{"-listen", "127.0.0.1:0", "-mgmt-listen", "127.0.0.1:0", "-data", filepath.Join(dir, "data")}
	d := startDaemon(t, "", args...)
	api := mgmtClient{t: t, base: d.mgmtURL()}
	api.call("PUT", "/api/parameters/shovel/%2F/from-rabbit", map[string]any{"value": map[string]any{
		"src-uri": rabbit.url, "src-queue": "from-rabbit",
		"dest-uri": "amqp://", "dest-queue": "from-rabbit",
		"ack-mode": "on-confirm",
	}}, 201, nil)

	// The producer keeps publishing to RabbitMQ while the shovel runs.
	stop := make(chan struct{})
	pubDone := make(chan error, 1)
	go func() {
		// A pace, not a synchronisation: about 2,000 messages a second,
		// so that the producer publishes across the kill and the restart
		// without outrunning the shovel for long.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for sent := 0; sent < extra; sent += 20 {
			select {
			case <-stop:
				pubDone <- nil
				return
			case <-tick.C:
			}
			if err := pub.publish(20); err != nil {
				pubDone <- err
				return
			}
		}
		pubDone <- nil
	}()
	stopPublisher := func() {
		select {
		case <-stop:
			return
		default:
		}
		close(stop)
		if err := <-pubDone; err != nil {
			t.Errorf("publishing to RabbitMQ while the shovel runs: %v", err)
		}
	}
	defer stopPublisher()

	sh := awaitShovel(t, d, api, "from-rabbit", func(s shovelRow) bool { return s.Forwarded >= backlog/2 })
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.wait()
	t.Logf("brokerd killed after the shovel moved %d messages (%d published to RabbitMQ)", sh.Forwarded, pub.count())

	d = startDaemon(t, "", args...)
	api = mgmtClient{t: t, base: d.mgmtURL()}
	awaitShovel(t, d, api, "from-rabbit", func(s shovelRow) bool { return s.State == "running" && s.Forwarded > 0 })
	stopPublisher()
	t.Logf("%d messages published to RabbitMQ, %d confirmed", pub.count(), len(pub.confirmed))

	// Until RabbitMQ's queue is empty, the shovel's unacknowledged
	// messages included.
	rch, err := rconn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		st, err := rch.QueueDeclarePassive("from-rabbit", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Messages == 0 {
			total, err := rabbit.queueTotal("from-rabbit")
			if err != nil {
				t.Fatal(err)
			}
			if total == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("RabbitMQ's queue still has %d messages ready; shovels %v", st.Messages, shovelRows(api))
		}
		select {
		case <-d.done:
			t.Fatalf("brokerd exited:\n%s", d.log())
		case <-time.After(50 * time.Millisecond): // polls RabbitMQ's queue depth
		}
	}
	t.Logf("RabbitMQ's queue emptied %v after the start", time.Since(start))
	deleteShovel(t, d, api, "from-rabbit")

	bconn, err := amqp091.Dial(d.url())
	if err != nil {
		t.Fatal(err)
	}
	defer bconn.Close()
	copies := make(map[int]int)    // every copy, by sequence number
	unflagged := make(map[int]int) // copies not flagged redelivered
	got := consumeAll(t, bconn, "from-rabbit", func(m amqp091.Delivery) {
		i := checkSeqMessage(t, "brokerd", m)
		copies[i]++
		if !m.Redelivered {
			unflagged[i]++
			if unflagged[i] > 1 {
				t.Fatalf("message %d in brokerd twice, neither copy flagged redelivered", i)
			}
		}
	})
	for i := range pub.confirmed {
		if copies[i] == 0 {
			t.Errorf("message %d, confirmed by RabbitMQ, is not in brokerd", i)
		}
	}
	for i := range copies {
		if i >= pub.count() {
			t.Errorf("message %d in brokerd was never published", i)
		}
	}
	t.Logf("brokerd's queue: %d messages, %d distinct, %d of %d published confirmed", got, len(copies), len(pub.confirmed), pub.count())
	if t.Failed() {
		return
	}

	// The other way: brokerd to RabbitMQ, killing RabbitMQ with SIGKILL
	// while the shovel fills its queue. What RabbitMQ had not confirmed
	// (in its socket buffers, mailboxes and write buffers) is lost with
	// it: the shovel must not have acknowledged it to brokerd.
	rconn.Close()
	bpub := newSeqPublisher(t, bconn, "to-rabbit")
	if err := bpub.publish(back); err != nil {
		t.Fatal(err)
	}
	if len(bpub.confirmed) != back {
		t.Fatalf("brokerd confirmed %d of %d", len(bpub.confirmed), back)
	}
	rconn, err = amqp091.Dial(rabbit.url)
	if err != nil {
		t.Fatal(err)
	}
	if rch, err = rconn.Channel(); err != nil {
		t.Fatal(err)
	}
	if _, err := rch.QueueDeclare("to-rabbit", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	api.call("PUT", "/api/parameters/shovel/%2F/to-rabbit", map[string]any{"value": map[string]any{
		"src-uri": "amqp://", "src-queue": "to-rabbit",
		"dest-uri": rabbit.url, "dest-queue": "to-rabbit",
		"ack-mode": "on-confirm", "reconnect-delay": 1,
	}}, 201, nil)
	deadline = time.Now().Add(60 * time.Second)
	for {
		st, err := rch.QueueDeclarePassive("to-rabbit", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Messages >= back/4 {
			t.Logf("RabbitMQ killed with %d of %d messages in its queue", st.Messages, back)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("RabbitMQ's queue has %d messages; shovels %v", st.Messages, shovelRows(api))
		}
		<-time.After(5 * time.Millisecond) // polls RabbitMQ's queue depth
	}
	rabbit.kill()
	rconn.Close()
	rabbit.launch()
	deadline = time.Now().Add(60 * time.Second)
	for {
		var q struct {
			Messages int `json:"messages"`
		}
		api.call("GET", "/api/queues/%2F/to-rabbit", nil, 200, &q)
		if q.Messages == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("brokerd's queue still has %d messages; shovels %v", q.Messages, shovelRows(api))
		}
		<-time.After(20 * time.Millisecond) // polls brokerd's queue depth
	}
	deleteShovel(t, d, api, "to-rabbit")
	if rconn, err = amqp091.Dial(rabbit.url); err != nil {
		t.Fatal(err)
	}
	defer rconn.Close()
	// RabbitMQ does not know brokerd's mark: a message it holds twice
	// (not confirmed when it was killed, yet recovered) is not flagged.
	copies = make(map[int]int)
	got = consumeAll(t, rconn, "to-rabbit", func(m amqp091.Delivery) {
		copies[checkSeqMessage(t, "RabbitMQ", m)]++
	})
	for i := range bpub.confirmed {
		if copies[i] == 0 {
			t.Errorf("message %d, confirmed by brokerd, is not in RabbitMQ", i)
		}
	}
	if len(copies) != back {
		t.Errorf("%d distinct messages in RabbitMQ, want %d", len(copies), back)
	}
	t.Logf("RabbitMQ's queue: %d messages, %d distinct", got, len(copies))
}

// seqMessage is message i: its body is i, and every property and a
// header of each field type RabbitMQ and brokerd both keep are set from
// it, so that the consumer can tell one changed.
func seqMessage(i int) amqp091.Publishing {
	s := strconv.Itoa(i)
	return amqp091.Publishing{
		DeliveryMode:    amqp091.Persistent,
		ContentType:     "application/x-seq",
		ContentEncoding: "identity",
		Priority:        uint8(1 + i%9),
		CorrelationId:   "corr-" + s,
		ReplyTo:         "reply-" + s,
		MessageId:       "msg-" + s,
		Timestamp:       time.Unix(1_700_000_000+int64(i), 0),
		Type:            "seq",
		UserId:          "guest",
		AppId:           "rabbitshovel",
		Headers: amqp091.Table{
			"seq":    int64(i),
			"name":   "m" + s,
			"i32":    int32(-i),
			"half":   float64(i) / 2,
			"even":   i%2 == 0,
			"nested": amqp091.Table{"s": s, "n": int64(i) * 3},
			"list":   []any{s, int64(i), true},
		},
		Body: []byte(s),
	}
}

// checkSeqMessage checks that m is a seqMessage as published and returns
// its number.
func checkSeqMessage(t *testing.T, where string, m amqp091.Delivery) int {
	t.Helper()
	i, err := strconv.Atoi(string(m.Body))
	if err != nil || i < 0 {
		t.Fatalf("%s: unexpected message %q", where, m.Body)
	}
	w := seqMessage(i)
	got := amqp091.Publishing{
		DeliveryMode: m.DeliveryMode, ContentType: m.ContentType, ContentEncoding: m.ContentEncoding,
		Priority: m.Priority, CorrelationId: m.CorrelationId, ReplyTo: m.ReplyTo, MessageId: m.MessageId,
		Timestamp: m.Timestamp, Type: m.Type, UserId: m.UserId, AppId: m.AppId, Headers: m.Headers, Body: m.Body,
	}
	if !got.Timestamp.Equal(w.Timestamp) {
		t.Fatalf("%s: message %d: timestamp %v, want %v", where, i, got.Timestamp, w.Timestamp)
	}
	got.Timestamp = w.Timestamp
	if !reflect.DeepEqual(got, w) {
		t.Fatalf("%s: message %d changed:\n got %#v\nwant %#v", where, i, got, w)
	}
	return i
}

// seqPublisher publishes seqMessages, numbered from 0, to a queue through
// the default exchange on a channel in confirm mode, and records which
// the broker confirmed. It is used by one goroutine at a time.
type seqPublisher struct {
	t         *testing.T
	ch        *amqp091.Channel
	queue     string
	confirms  chan amqp091.Confirmation
	mu        sync.Mutex
	next      int
	confirmed map[int]bool
}

// newSeqPublisher declares queue q durable and opens a publisher to it.
func newSeqPublisher(t *testing.T, conn *amqp091.Connection, q string) *seqPublisher {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return &seqPublisher{t: t, ch: ch, queue: q, confirmed: make(map[int]bool),
		confirms: ch.NotifyPublish(make(chan amqp091.Confirmation, 1000))}
}

// publish publishes n messages, 1,000 at most awaiting confirms, and
// waits for their confirms. Delivery tag k is message k-1.
func (p *seqPublisher) publish(n int) error {
	for n > 0 {
		batch := min(n, 1000)
		p.mu.Lock()
		first := p.next
		p.mu.Unlock()
		for i := first; i < first+batch; i++ {
			if err := p.ch.PublishWithContext(context.Background(), "", p.queue, false, false, seqMessage(i)); err != nil {
				return fmt.Errorf("publish %d: %w", i, err)
			}
		}
		p.mu.Lock()
		p.next += batch
		p.mu.Unlock()
		for range batch {
			select {
			case c, ok := <-p.confirms:
				if !ok {
					return fmt.Errorf("channel closed awaiting confirms")
				}
				if c.Ack {
					p.mu.Lock()
					p.confirmed[int(c.DeliveryTag)-1] = true
					p.mu.Unlock()
				}
			case <-time.After(30 * time.Second):
				return fmt.Errorf("no confirm in 30s")
			}
		}
		n -= batch
	}
	return nil
}

// count is the number of messages published.
func (p *seqPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next
}

// shovelRow is a row of /api/shovels.
type shovelRow struct {
	Name      string `json:"name"`
	Vhost     string `json:"vhost"`
	State     string `json:"state"`
	Reason    string `json:"reason"`
	Forwarded int    `json:"messages_forwarded"`
}

func shovelRows(api mgmtClient) []shovelRow {
	var rows []shovelRow
	api.call("GET", "/api/shovels", nil, 200, &rows)
	return rows
}

// awaitShovel polls /api/shovels until shovel name's row satisfies ok,
// and returns it.
func awaitShovel(t *testing.T, d *daemon, api mgmtClient, name string, ok func(shovelRow) bool) shovelRow {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		rows := shovelRows(api)
		for _, r := range rows {
			if r.Name == name && r.Vhost == "/" && ok(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("shovel %s: %+v", name, rows)
		}
		select {
		case <-d.done:
			t.Fatalf("brokerd exited:\n%s", d.log())
		case <-time.After(20 * time.Millisecond): // polls the shovel's progress
		}
	}
}

// deleteShovel deletes shovel name and waits until it has stopped.
func deleteShovel(t *testing.T, d *daemon, api mgmtClient, name string) {
	t.Helper()
	api.call("DELETE", "/api/parameters/shovel/%2F/"+url.PathEscape(name), nil, 204, nil)
	deadline := time.Now().Add(30 * time.Second)
	for {
		gone := true
		for _, r := range shovelRows(api) {
			gone = gone && r.Name != name
		}
		if gone {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("shovel %s still listed after its deletion", name)
		}
		<-time.After(20 * time.Millisecond) // polls the shovels' list
	}
}

// consumeAll consumes every message queue q holds (nothing may publish
// to it meanwhile), acknowledging them, and returns how many it got.
func consumeAll(t *testing.T, conn *amqp091.Connection, q string, each func(amqp091.Delivery)) int {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1000, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for got := 0; got < st.Messages; got++ {
		select {
		case m, ok := <-ds:
			if !ok {
				t.Fatalf("consumer of %s closed after %d of %d", q, got, st.Messages)
			}
			each(m)
			if (got+1)%500 == 0 || got+1 == st.Messages {
				if err := m.Ack(true); err != nil {
					t.Fatal(err)
				}
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d messages of %s in 30s", got, st.Messages, q)
		}
	}
	return st.Messages
}
