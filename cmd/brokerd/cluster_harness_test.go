package main

// The fault tests' harness on a testNodes cluster: faults on processes
// and links, publishers and consumers that reconnect, and the final
// drain (cluster_fault_test.go uses them).

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/internal/faultproxy"
	"github.com/brokerd/brokerd/internal/history"
)

// electionTimeout is the test clusters' (the defaults: 10 ticks of
// 100 ms).
const electionTimeout = time.Second

// kill stops node i with SIGKILL and waits for it to exit.
func (tn *testNodes) kill(i int) {
	tn.t.Helper()
	if !tn.alive(i) {
		return
	}
	if err := tn.procs[i].cmd.Process.Kill(); err != nil {
		tn.t.Fatal(err)
	}
	<-tn.procs[i].done
}

// wipe removes node i's data dir (the node is down: a replaced disk).
func (tn *testNodes) wipe(i int) {
	tn.t.Helper()
	if err := os.RemoveAll(filepath.Join(filepath.Dir(tn.configs[i]), tn.names[i])); err != nil {
		tn.t.Fatal(err)
	}
}

// term stops node i with SIGTERM and waits for it to exit cleanly.
func (tn *testNodes) term(i int) {
	tn.t.Helper()
	if err := tn.procs[i].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		tn.t.Fatal(err)
	}
	select {
	case <-tn.procs[i].done:
	case <-time.After(daemonStartTimeout):
		tn.t.Fatalf("%s did not stop on SIGTERM:\n%s", tn.names[i], tn.procs[i].log())
	}
	if c := tn.procs[i].code; c != 0 {
		tn.t.Fatalf("%s exited with %d on SIGTERM:\n%s", tn.names[i], c, tn.procs[i].log())
	}
}

// pause stops node i with SIGSTOP; resume continues it.
func (tn *testNodes) pause(i int) {
	tn.t.Helper()
	if !tn.alive(i) {
		tn.t.Fatalf("%s exited with %d:\n%s", tn.names[i], tn.procs[i].code, tn.procs[i].log())
	}
	if err := tn.procs[i].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		tn.t.Fatal(err)
	}
	tn.paused[i] = true
}

func (tn *testNodes) resume(i int) {
	tn.t.Helper()
	if err := tn.procs[i].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		tn.t.Fatal(err)
	}
	tn.paused[i] = false
}

// link returns the proxy on a → b.
func (tn *testNodes) link(a, b int) *faultproxy.Proxy { return tn.proxies[a][b] }

// isolate puts every link to and from node i in mode m.
func (tn *testNodes) isolate(i int, m faultproxy.Mode) {
	for j := range tn.names {
		if j != i {
			tn.link(i, j).SetMode(m)
			tn.link(j, i).SetMode(m)
		}
	}
}

// heal lets every link pass again, without delay.
func (tn *testNodes) heal() {
	for a := range tn.proxies {
		for _, p := range tn.proxies[a] {
			if p != nil {
				p.SetDelay(0)
				p.Pass()
			}
		}
	}
}

// restore brings the cluster whole again: links healed, paused nodes
// continued, stopped ones started.
func (tn *testNodes) restore() {
	tn.heal()
	for i := range tn.names {
		switch {
		case !tn.alive(i):
			tn.start(i)
		case tn.paused[i]:
			tn.resume(i)
		}
	}
}

// rejectsToDeath says whether consumers reject (without requeue) every
// delivery of id, so that it must reach the dead-letter queue.
func rejectsToDeath(id string) bool {
	h := fnv.New32a()
	h.Write([]byte(id))
	return h.Sum32()%8 == 0
}

// clusterConsumer consumes q with acks through the nodes in turn,
// reconnecting to the next one when its connection fails: it rejects
// (requeue=false, so to q's dead-letter exchange) the ids rejectsToDeath
// names, nacks a share of the others with requeue, acks the rest, and
// records every delivery in rec.
type clusterConsumer struct {
	tn   *testNodes
	rec  *history.Recorder
	q    string
	args amqp091.Table
	rng  *rand.Rand // owned by run
	// ackAll makes it ack every delivery (no rejects, no requeues).
	ackAll bool
	count  atomic.Int64
	// name labels its deliveries in the history, with the session (a
	// count of its connections, from 1), the node it dialed, the
	// delivery tag and what it did.
	name     string
	sessions int // owned by run
}

func (c *clusterConsumer) run(ctx context.Context, first int) {
	node := first
	for ctx.Err() == nil {
		c.sessions++
		c.session(ctx, node)
		node = (node + 1) % len(c.tn.names)
	}
}

func (c *clusterConsumer) session(ctx context.Context, node int) {
	conn, raw, err := dialNode(c.tn, node)
	if err != nil {
		return
	}
	defer conn.Close()
	defer raw.Close() // gives up at once: ctx ended or the connection failed
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	if _, err := ch.QueueDeclare(c.q, true, false, false, false, c.args); err != nil {
		return
	}
	if err := ch.Qos(50, 0, false); err != nil {
		return
	}
	// No delivery of this session can be sent before its basic.consume.
	asked := time.Now()
	ds, err := ch.ConsumeWithContext(ctx, c.q, "", false, false, false, false, nil)
	if err != nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-ds:
			if !ok {
				return
			}
			act := "ack"
			switch {
			case c.ackAll:
			case rejectsToDeath(d.MessageId):
				act = "reject"
			case c.rng.Intn(20) == 0:
				act = "requeue"
			}
			c.rec.RecordDelivery(c.q, history.Delivery{ID: d.MessageId, Redelivered: d.Redelivered, NotBefore: asked,
				Via: fmt.Sprintf("%s session %d via %s tag %d %s", c.name, c.sessions, c.tn.names[node], d.DeliveryTag, act)})
			c.count.Add(1)
			switch act {
			case "reject":
				err = d.Reject(false)
			case "requeue":
				err = d.Nack(false, true)
			default:
				err = d.Ack(false)
			}
			if err != nil {
				return
			}
		}
	}
}

// onAnyNode runs f on a channel of a connection to one node after
// another until it succeeds, or fails the test after a minute.
func onAnyNode(t *testing.T, tn *testNodes, f func(ch *amqp091.Channel) error) {
	t.Helper()
	onAnyNodeN(t, tn, func(_ int, ch *amqp091.Channel) error { return f(ch) })
}

// onAnyNodeN is onAnyNode telling f which node it dialed.
func onAnyNodeN(t *testing.T, tn *testNodes, f func(node int, ch *amqp091.Channel) error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last error
	for i := 0; time.Now().Before(deadline); i++ {
		node := i % len(tn.names)
		if !tn.alive(node) || tn.paused[node] {
			continue
		}
		conn, raw, err := dialNode(tn, node)
		if err != nil {
			last = err
			time.Sleep(50 * time.Millisecond) // an election may be under way
			continue
		}
		ch, err := conn.Channel()
		if err == nil {
			err = f(node, ch)
		}
		if err == nil {
			conn.Close()
			return
		}
		raw.Close()
		conn.Close()
		last = err
		var ae *amqp091.Error
		if errors.As(err, &ae) && !ae.Recover && ae.Code != amqp091.ConnectionForced && ae.Code != amqp091.ChannelError {
			t.Fatal(err) // a refusal, not a failover: retrying would hide it
		}
	}
	t.Fatalf("no node did it within a minute: %v", last)
}

// drainQueues waits until q has no consumers (so that every message the
// stopped consumers held is back in it), then gets every message from
// each queue in turn, acking it, or rejecting it if reject says so, and
// records the deliveries.
func drainQueues(t *testing.T, tn *testNodes, rec *history.Recorder, reject func(id string) bool, queues ...string) {
	t.Helper()
	for _, q := range queues {
		for {
			consumers := -1
			onAnyNode(t, tn, func(ch *amqp091.Channel) error {
				st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
				consumers = st.Consumers
				return err
			})
			if consumers == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond) // polls the consumer count
		}
		onAnyNodeN(t, tn, func(node int, ch *amqp091.Channel) error {
			for {
				asked := time.Now()
				m, ok, err := ch.Get(q, false)
				if err != nil || !ok {
					return err
				}
				rejected := reject != nil && reject(m.MessageId)
				rec.RecordDelivery(q, history.Delivery{ID: m.MessageId, Redelivered: m.Redelivered, NotBefore: asked,
					Via: fmt.Sprintf("drain via %s tag %d %s", tn.names[node], m.DeliveryTag, map[bool]string{false: "ack", true: "reject"}[rejected])})
				if rejected {
					err = m.Reject(false)
				} else {
					err = m.Ack(false)
				}
				if err != nil {
					return err
				}
			}
		})
	}
}

// workload is publishers and consumers running on a cluster while a test
// breaks it: work is a quorum queue whose rejected messages go to dead;
// ordered has one publisher and one consumer that never requeues.
type workload struct {
	tn     *testNodes
	rec    *history.Recorder
	pubs   []*clusterPublisher // on work
	opub   *clusterPublisher   // on ordered
	cons   []*clusterConsumer
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var orderedArgs = amqp091.Table{"x-queue-type": "quorum"}

var workArgs = amqp091.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}

// startWorkload declares the queues and starts publishers and consumers
// (paced so that a run's backlog stays small), each starting on its own
// node.
func startWorkload(t *testing.T, tn *testNodes, seed int64, publishers, consumers int) *workload {
	onAnyNode(t, tn, func(ch *amqp091.Channel) error {
		if _, err := ch.QueueDeclare("dead", true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare("ordered", true, false, false, false, orderedArgs); err != nil {
			return err
		}
		_, err := ch.QueueDeclare("work", true, false, false, false, workArgs)
		return err
	})
	ctx, cancel := context.WithCancel(context.Background())
	w := &workload{tn: tn, rec: history.New(), cancel: cancel}
	// One publisher and one consumer that acks everything on "ordered":
	// first deliveries must come in publish order.
	w.opub = &clusterPublisher{tn: tn, rec: w.rec, q: "ordered", args: orderedArgs, id: "o-",
		confirmTimeout: 3 * time.Second, pace: 5 * time.Millisecond}
	ocons := &clusterConsumer{tn: tn, rec: w.rec, q: "ordered", args: orderedArgs, ackAll: true, name: "o"}
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		w.opub.run(ctx, 2, 0)
	}()
	go func() {
		defer w.wg.Done()
		ocons.run(ctx, 1)
	}()
	for i := range publishers {
		p := &clusterPublisher{tn: tn, rec: w.rec, q: "work", args: workArgs, id: fmt.Sprintf("p%d-", i),
			confirmTimeout: 3 * time.Second, pace: 2 * time.Millisecond}
		w.pubs = append(w.pubs, p)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			p.run(ctx, i%len(tn.names), 0)
		}()
	}
	for i := range consumers {
		c := &clusterConsumer{tn: tn, rec: w.rec, q: "work", args: workArgs, rng: rand.New(rand.NewSource(seed + int64(i))), name: fmt.Sprintf("c%d", i)}
		w.cons = append(w.cons, c)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			c.run(ctx, (i+1)%len(tn.names))
		}()
	}
	// Some confirms on ordered before any fault, or a short run under
	// faults may end with none and its order unchecked.
	w.opub.awaitCount(t, 10)
	return w
}

// confirms is the publishers' confirms so far.
func (w *workload) confirms() int64 {
	var n int64
	for _, p := range w.pubs {
		n += p.count.Load()
	}
	return n
}

// awaitProgress waits for n more confirms, failing the test if they do
// not come within a minute (the cluster is whole again: it must serve).
func (w *workload) awaitProgress(t *testing.T, n int64, what string) time.Duration {
	t.Helper()
	start := time.Now()
	want := w.confirms() + n
	for w.confirms() < want {
		if time.Since(start) > time.Minute {
			t.Fatalf("%s: %d confirms in a minute, %d wanted", what, w.confirms()-want+n, n)
		}
		time.Sleep(5 * time.Millisecond) // polls the publishers' counts
	}
	return time.Since(start)
}

// finish stops the clients, drains the queues and checks the history:
// every confirmed message delivered, nothing phantom, no silent
// duplicate, every confirmed message the consumers reject in exactly one
// dead-letter queue, once, and ordered's first deliveries in publish
// order.
func (w *workload) finish(t *testing.T) (rep history.Report, mustDie int) {
	t.Helper()
	w.cancel()
	w.wg.Wait()
	w.tn.restore()
	drainQueues(t, w.tn, w.rec, rejectsToDeath, "work", "dead")
	drainQueues(t, w.tn, w.rec, nil, "ordered")
	var die []string
	for _, p := range w.pubs {
		for _, id := range p.confirmedIDs() {
			if rejectsToDeath(id) {
				die = append(die, id)
			}
		}
	}
	rep = w.rec.Check(history.Checks{DeadLetterQueues: []string{"dead"}, MustDie: die, Ordered: []string{"ordered"}})
	if !rep.OK() {
		t.Fatal(rep)
	}
	if n := w.opub.count.Load(); n == 0 {
		t.Fatal("nothing confirmed on ordered: its order is not checked")
	}
	if rep.Confirmed == 0 || len(die) == 0 {
		t.Fatalf("%d confirmed, %d of them rejected to the dead-letter queue: too few to check", rep.Confirmed, len(die))
	}
	return rep, len(die)
}
