package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// crashLedger is what the clients saw before a crash: which messages were
// published and confirmed, delivered, acked or rejected, and where.
type crashLedger struct {
	mu         sync.Mutex
	published  map[int64]bool
	confirmed  map[int64]bool
	delivered  map[int64]bool // delivered from work at least once
	ackedWork  map[int64]bool // acked from work (the ack may not have been durable)
	ackedDLQ   map[int64]bool
	found      map[int64]bool  // taken by an earlier verify (auto-ack)
	deadlines  map[int64]int64 // confirmed messages with a TTL: a time after their deadline, unix ms
	volSeen    map[int64]bool  // dead letters of the non-durable queue found so far
	confirms   int
	confirmedN chan struct{} // closed when confirms reaches target
	target     int
}

// newLedger starts the ledger of a whole test. It is cumulative: a
// message may surface rounds after it was published (an ack or a verify's
// auto-ack that was not yet durable when the broker was killed).
func newLedger() *crashLedger {
	return &crashLedger{
		published: map[int64]bool{}, confirmed: map[int64]bool{}, delivered: map[int64]bool{},
		ackedWork: map[int64]bool{}, ackedDLQ: map[int64]bool{}, deadlines: map[int64]int64{},
		found: map[int64]bool{}, volSeen: map[int64]bool{},
	}
}

// reset starts a round that ends after target more confirms.
func (l *crashLedger) reset(target int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.confirms, l.target, l.confirmedN = 0, target, make(chan struct{})
}

func (l *crashLedger) confirm(id int64, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.confirmed[id] = true
	if ttl > 0 {
		l.deadlines[id] = time.Now().Add(ttl).UnixMilli()
	}
	l.confirms++
	if l.confirms == l.target {
		close(l.confirmedN)
	}
}

// crashWorkMax bounds the work queue: deeper than the delivered mark runs
// ahead of deliveries (broker/marks.go), so some of what comes back after
// a crash lies beyond the durable mark and must not be flagged
// redelivered.
const crashWorkMax = 3000

const (
	crashWork = "crash-work"
	crashDLQ  = "crash-dlq"
	// A non-durable queue, fed persistent and transient messages with
	// short TTLs, pages them out (into the store's volatile range) and
	// dead-letters them into a durable queue that nobody consumes
	// during a round.
	crashVol    = "crash-vol"
	crashVolDLQ = "crash-vol-dlq"
)

func crashTopology(t *testing.T, ch *amqp091.Channel) {
	t.Helper()
	if _, err := ch.QueueDeclare(crashDLQ, true, false, false, false, nil); err != nil {
		t.Fatalf("declare dlq: %v", err)
	}
	_, err := ch.QueueDeclare(crashWork, true, false, false, false, amqp091.Table{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": crashDLQ,
		"x-max-length":              int32(crashWorkMax),
	})
	if err != nil {
		t.Fatalf("declare work: %v", err)
	}
	if _, err := ch.QueueDeclare(crashVolDLQ, true, false, false, false, nil); err != nil {
		t.Fatalf("declare vol dlq: %v", err)
	}
	_, err = ch.QueueDeclare(crashVol, false, false, false, false, amqp091.Table{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": crashVolDLQ,
	})
	if err != nil {
		t.Fatalf("declare vol: %v", err)
	}
}

// crashVolPublisher publishes to the non-durable queue until its
// connection breaks: persistent and transient messages alternately, each
// with a TTL of 20-300 ms, in confirmed batches of 50.
func crashVolPublisher(conn *amqp091.Connection, firstID int64, rng *rand.Rand) {
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	if err := ch.Confirm(false); err != nil {
		return
	}
	for id := firstID; ; id++ {
		mode := uint8(amqp091.Transient)
		if id%2 == 0 {
			mode = amqp091.Persistent
		}
		pub := amqp091.Publishing{DeliveryMode: mode, Body: []byte(fmt.Sprint("vol-", id)),
			Headers: amqp091.Table{"id": id}, Expiration: strconv.Itoa(20 + rng.IntN(280))}
		conf, err := ch.PublishWithDeferredConfirm("", crashVol, false, false, pub)
		if err != nil {
			return
		}
		if id%50 == 0 {
			if ok, err := conf.WaitContext(context.Background()); !ok || err != nil {
				return
			}
		}
	}
}

// crashMarkChunk is TestCrashKill9's storage.delivered_mark_chunk.
const crashMarkChunk = 64

// TestCrashKill9 runs publishers with confirms, a consumer that acks,
// rejects and requeues, messages expiring and overflowing into a
// dead-letter queue, and kills brokerd with SIGKILL at a random moment,
// round after round. After each restart it drains both queues and
// checks: no confirmed message lost, none invented, every dead letter in
// exactly one place, no message delivered after its deadline, and every
// message delivered before the crash redelivered with redelivered=true.
// BROKERD_CRASH_ROUNDS sets the number of rounds (default 4).
func TestCrashKill9(t *testing.T) {
	rounds := 4
	if v := os.Getenv("BROKERD_CRASH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("BROKERD_CRASH_ROUNDS=%q: %v", v, err)
		}
		rounds = n
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	// A tiny page window: the queues page (entries leave memory, are read
	// back, and are recovered from counters) all through the crashes. A
	// small delivered-mark chunk (crashMarkChunk): never-delivered messages
	// beyond it must come back redelivered=false.
	cfg := filepath.Join(dir, "brokerd.toml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "[storage]\npage_window = 8\ndelivered_mark_chunk = %d\n", crashMarkChunk), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-config", cfg, "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", data}
	var ledger *crashLedger
	var nextID int64
	for round := range rounds {
		d := startDaemon(t, "", args...)
		url := d.url()
		if ledger != nil {
			verifyAfterCrash(t, url, ledger, round)
		}
		if ledger == nil {
			ledger = newLedger()
		}
		ledger.reset(100 + rng.IntN(1500))
		nextID = crashRound(t, url, ledger, rng, nextID)
		if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		d.wait()
	}
	d := startDaemon(t, "", args...)
	verifyAfterCrash(t, d.url(), ledger, rounds)
}

// crashRound runs the workload until the ledger has its target of
// confirms, and returns with the clients still running: the caller kills
// the broker under them.
func crashRound(t *testing.T, url string, l *crashLedger, rng *rand.Rand, firstID int64) int64 {
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	crashTopology(t, ch)
	ch.Close()
	ids := make(chan int64, 1<<16)
	for i := firstID + 1; i <= firstID+int64(l.target)*3; i++ {
		ids <- i
	}
	close(ids)
	var wg sync.WaitGroup
	for p := range 2 {
		prng := rand.New(rand.NewPCG(rng.Uint64(), uint64(p)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			crashPublisher(conn, l, ids, prng)
		}()
	}
	crng := rand.New(rand.NewPCG(rng.Uint64(), 9))
	vrng := rand.New(rand.NewPCG(rng.Uint64(), 10))
	wg.Add(3)
	go func() { defer wg.Done(); crashVolPublisher(conn, 1<<40+firstID*1000, vrng) }()
	go func() { defer wg.Done(); crashConsumer(conn, l, crashWork, crng) }()
	go func() { defer wg.Done(); crashConsumer(conn, l, crashDLQ, nil) }()
	select {
	case <-l.confirmedN:
	case <-time.After(60 * time.Second):
		t.Fatalf("round: only %d of %d confirms in 60s", l.confirms, l.target)
	}
	// The clients keep running while the caller kills the broker; they
	// end when their connection breaks. Wait for them in the background
	// so the test does not leak them.
	t.Cleanup(wg.Wait)
	return firstID + int64(l.target)*3
}

func crashPublisher(conn *amqp091.Connection, l *crashLedger, ids <-chan int64, rng *rand.Rand) {
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	if err := ch.Confirm(false); err != nil {
		return
	}
	window := make(chan struct{}, 200)
	for id := range ids {
		pub := amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(fmt.Sprint("msg-", id)),
			Headers: amqp091.Table{"id": id}}
		var ttl time.Duration
		if rng.IntN(4) == 0 {
			ms := 20 + rng.IntN(300)
			ttl = time.Duration(ms) * time.Millisecond
			pub.Expiration = strconv.Itoa(ms)
		}
		l.mu.Lock()
		l.published[id] = true
		l.mu.Unlock()
		window <- struct{}{}
		conf, err := ch.PublishWithDeferredConfirm("", crashWork, false, false, pub)
		if err != nil {
			return
		}
		go func() {
			defer func() { <-window }()
			ok, err := conf.WaitContext(context.Background())
			if ok && err == nil {
				// The broker fixed the deadline when it enqueued the
				// message, before this confirm: now + TTL is later
				// than the broker's deadline.
				l.confirm(id, ttl)
			}
		}()
	}
}

// crashConsumer consumes q with manual acks. On the work queue (rng set)
// it acks 70 %, rejects 20 % (dead-lettered) and requeues 10 %; on the
// dead-letter queue it acks all.
func crashConsumer(conn *amqp091.Connection, l *crashLedger, q string, rng *rand.Rand) {
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	ch.Qos(20, 0, false)
	msgs, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		return
	}
	for m := range msgs {
		id, _ := m.Headers["id"].(int64)
		if rng == nil {
			if m.Ack(false) == nil {
				l.mu.Lock()
				l.ackedDLQ[id] = true
				l.mu.Unlock()
			}
			continue
		}
		l.mu.Lock()
		l.delivered[id] = true
		l.mu.Unlock()
		switch r := rng.IntN(10); {
		case r < 7:
			if m.Ack(false) == nil {
				l.mu.Lock()
				l.ackedWork[id] = true
				l.mu.Unlock()
			}
		case r < 9:
			m.Reject(false)
		default:
			m.Nack(false, true)
		}
	}
}

// verifyAfterCrash drains both queues of a restarted broker and checks
// them against the ledger of the round before the crash.
func verifyAfterCrash(t *testing.T, url string, l *crashLedger, round int) {
	t.Helper()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatalf("round %d: dial restarted broker: %v", round, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	crashTopology(t, ch)
	inWork := map[int64]int{}
	inDLQ := map[int64]int{}
	// Never-delivered messages that come back flagged redelivered: those
	// the durable mark covered, written ahead of the deliveries by up to
	// one and a half chunks (broker/marks.go), and those sent but not yet
	// received when the broker died (the prefetch, 20).
	var neverTrue, neverFalse int
	l.mu.Lock()
	defer l.mu.Unlock()
	// A message is accounted for when it was settled before the crash or
	// is found now. Messages with a TTL may still be on their way to the
	// dead-letter queue: keep draining until all are accounted for or
	// their deadlines are well past.
	accounted := func(id int64) bool {
		return l.ackedWork[id] || l.ackedDLQ[id] || l.found[id] || inWork[id] > 0 || inDLQ[id] > 0
	}
	var latest int64
	for _, dl := range l.deadlines {
		latest = max(latest, dl)
	}
	giveUp := time.Now().Add(3 * time.Second)
	if t := time.UnixMilli(latest).Add(3 * time.Second); t.After(giveUp) {
		giveUp = t
	}
	check := func(q string, m amqp091.Delivery) {
		id, _ := m.Headers["id"].(int64)
		if !l.published[id] || string(m.Body) != fmt.Sprint("msg-", id) {
			t.Errorf("round %d: invented message in %s: id %d body %q", round, q, id, m.Body)
		}
		if q == crashDLQ {
			inDLQ[id]++
			return
		}
		inWork[id]++
		if dl, ok := l.deadlines[id]; ok && time.Now().UnixMilli() > dl+50 {
			t.Errorf("round %d: message %d delivered %d ms after its deadline", round, id, time.Now().UnixMilli()-dl)
		}
		if l.delivered[id] && !m.Redelivered {
			t.Errorf("round %d: message %d was delivered before the crash but comes back with redelivered=false", round, id)
		}
		if !l.delivered[id] {
			if m.Redelivered {
				neverTrue++
			} else {
				neverFalse++
			}
		}
	}
	// Everything deliverable in the work queue comes out now; what stays
	// has expired and moves to the dead-letter queue, whose consumer
	// waits for it.
	for {
		m, ok, err := ch.Get(crashWork, true)
		if err != nil {
			t.Fatalf("round %d: get %s: %v", round, crashWork, err)
		}
		if !ok {
			break
		}
		check(crashWork, m)
	}
	const dlqTag = "verify"
	dlq, err := ch.Consume(crashDLQ, dlqTag, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The confirmed messages not accounted for yet, computed once: the
	// ids accumulate over the rounds, and a scan of all of them per
	// delivery made this loop miss its deadline after ~100 rounds.
	missing := map[int64]bool{}
	for id := range l.confirmed {
		if !accounted(id) {
			missing[id] = true
		}
	}
	timeout := time.NewTimer(time.Until(giveUp))
	defer timeout.Stop()
	for len(missing) > 0 {
		select {
		case m := <-dlq:
			check(crashDLQ, m)
			id, _ := m.Headers["id"].(int64)
			delete(missing, id)
		case <-timeout.C:
			t.Errorf("round %d: %d confirmed messages still missing at the deadline", round, len(missing))
			goto done
		}
	}
done:
	// Drain the rest: the consumer's buffered deliveries (its channel
	// closes after cancel-ok), then whatever the queues still hold, so the
	// next round starts empty.
	if err := ch.Cancel(dlqTag, false); err != nil {
		t.Fatal(err)
	}
	for m := range dlq {
		check(crashDLQ, m)
	}
	for _, q := range []string{crashWork, crashDLQ} {
		for {
			m, ok, err := ch.Get(q, true)
			if err != nil {
				t.Fatalf("round %d: get %s: %v", round, q, err)
			}
			if !ok {
				break
			}
			check(q, m)
		}
	}
	for id := range l.confirmed {
		if !accounted(id) {
			t.Errorf("round %d: confirmed message %d lost (delivered before crash: %v)", round, id, l.delivered[id])
		}
	}
	for id, n := range inWork {
		if n > 1 || inDLQ[id] > 0 {
			t.Errorf("round %d: message %d found %d times in %s and %d times in %s", round, id, n, crashWork, inDLQ[id], crashDLQ)
		}
	}
	for id, n := range inDLQ {
		if n > 1 {
			t.Errorf("round %d: message %d found %d times in %s", round, id, n, crashDLQ)
		}
	}
	// The non-durable queue's dead letters that reached its durable
	// dead-letter queue: persistent ones only (a transient message in a
	// durable queue does not survive a restart), each with its own body,
	// each once across all rounds. (Nothing says how many: a dead letter
	// written after the last fsync is lost with the rest of the queue.)
	vol := 0
	for {
		m, ok, err := ch.Get(crashVolDLQ, true)
		if err != nil {
			t.Fatalf("round %d: get %s: %v", round, crashVolDLQ, err)
		}
		if !ok {
			break
		}
		vol++
		id, _ := m.Headers["id"].(int64)
		switch {
		case string(m.Body) != fmt.Sprint("vol-", id):
			t.Errorf("round %d: %s: id %d with body %q", round, crashVolDLQ, id, m.Body)
		case m.DeliveryMode != amqp091.Persistent:
			t.Errorf("round %d: %s: transient message %d survived a restart", round, crashVolDLQ, id)
		case l.volSeen[id]:
			t.Errorf("round %d: %s: message %d found again", round, crashVolDLQ, id)
		}
		if r, _ := m.Headers["x-first-death-reason"].(string); r != "expired" {
			t.Errorf("round %d: %s: message %d x-first-death-reason %q, want expired", round, crashVolDLQ, id, r)
		}
		l.volSeen[id] = true
	}
	if most := crashMarkChunk*3/2 + 20; neverTrue > most {
		t.Errorf("round %d: %d never-delivered messages came back redelivered=true (at most %d may)", round, neverTrue, most)
	}
	for id := range inWork {
		l.found[id] = true
	}
	for id := range inDLQ {
		l.found[id] = true
	}
	t.Logf("round %d: %d published, %d confirmed; after restart %d in work (never delivered: %d redelivered=false, %d true), %d in dlq, %d dead letters of the non-durable queue",
		round, len(l.published), len(l.confirmed), len(inWork), neverFalse, neverTrue, len(inDLQ), vol)
}
