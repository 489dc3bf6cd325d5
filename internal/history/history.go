// Package history records what clients saw of a broker during a test —
// publishes, confirms, nacks, deliveries — and checks it against what
// the broker promises, whatever happened to the broker meanwhile (a kill,
// a partition, a failover):
//
//   - no loss: every confirmed message is delivered at least once by the
//     end (the final drain included);
//   - no phantom: nothing is delivered that was never published;
//   - no silent duplicate: a message is delivered more than once from one
//     queue only with redelivered=true after its first delivery, in the
//     order the broker sent them (see below);
//   - dead letters exactly once: a message that died reaches exactly one
//     dead-letter queue, once (its copy may be redelivered there, flagged);
//   - order: in a queue fed by one publisher and read by one consumer
//     without requeues, first deliveries come in publish order.
//
// Definitions (defs.go) records queue declarations, checks and deletions
// and checks them for linearizability with porcupine: every answer
// explained by one queue table serving the operations one at a time.
//
// # The order of deliveries
//
// The recorder sees deliveries in the order consumers record them, which
// across consumers need not be the order the broker sent them: when the
// broker loses a consumer's connection (a partition cuts a connection a
// cluster node forwards), it requeues the consumer's unacknowledged
// deliveries and redelivers them at once, flagged, to another consumer,
// while the first consumer's client may still hand the test a delivery
// the broker sent before the loss — recorded after its redelivery. So the
// silent duplicate rule is checked against what receipt times prove of
// the sending order: a delivery with redelivered=false is a violation if
// another delivery of the message from the queue had redelivered=false
// too (one of the two was sent second), or if another was received before
// the broker could have sent it (Delivery.NotBefore: when the consumer's
// basic.consume or the basic.get went out). A delivery recorded without
// NotBefore counts as sent when it was received: any earlier delivery of
// the message then makes it a violation. The price: an unflagged delivery
// sent after another consumer received the message, to a consumer that
// had subscribed before, looks overtaken (Report.Overtaken counts them);
// a test after such a fault asks with basic.get, whose NotBefore is tight.
//
// A Recorder is safe for concurrent use: publisher and consumer goroutines
// record into one. Message ids are the test's (a message-id property, or a
// body it can parse); the broker never makes them up. Each event is
// recorded with its time, and a delivery with what the test says of the
// consumer that got it (RecordDelivery): a violation about one message
// lists its history, to be read against the brokers' logs.
package history

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Recorder collects a test's events.
type Recorder struct {
	mu        sync.Mutex
	published map[string]int // id -> order among all publishes, from 1
	nextSeq   int
	confirmed map[string]bool
	nacked    map[string]bool
	// When each id was published, confirmed or nacked (the last time).
	publishedAt, confirmedAt, nackedAt map[string]time.Time
	// deliveries by queue, in arrival order per queue.
	deliveries map[string][]Delivery
}

// Delivery is one delivery a consumer got.
type Delivery struct {
	ID          string
	Redelivered bool
	// At is when it was received (RecordDelivery sets it).
	At time.Time
	// Via labels it in a violation: which consumer, its connection, the
	// delivery tag, what the consumer did with it; "" for nothing.
	Via string
	// NotBefore is the earliest the broker can have sent it: when the
	// consumer's basic.consume, or the basic.get, went out. Zero: when it
	// was received (see the package doc).
	NotBefore time.Time
}

// New returns an empty Recorder.
func New() *Recorder {
	return &Recorder{published: map[string]int{}, confirmed: map[string]bool{}, nacked: map[string]bool{},
		publishedAt: map[string]time.Time{}, confirmedAt: map[string]time.Time{}, nackedAt: map[string]time.Time{},
		deliveries: map[string][]Delivery{}}
}

// Published records that a publish of id was attempted (call it before
// the publish is sent: a publish whose connection died may still have
// reached the broker).
func (r *Recorder) Published(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextSeq++
	r.published[id] = r.nextSeq
	r.publishedAt[id] = time.Now()
}

// Confirmed records the broker's basic.ack of id's publish.
func (r *Recorder) Confirmed(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.confirmed[id] = true
	r.confirmedAt[id] = time.Now()
}

// Nacked records the broker's basic.nack of id's publish.
func (r *Recorder) Nacked(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nacked[id] = true
	r.nackedAt[id] = time.Now()
}

// Delivered records a delivery of id from queue, received now.
func (r *Recorder) Delivered(queue, id string, redelivered bool) {
	r.RecordDelivery(queue, Delivery{ID: id, Redelivered: redelivered})
}

// RecordDelivery records delivery d from queue, received now (d.At is
// set): Delivered with what the test knows of it, its label and the
// earliest the broker can have sent it.
func (r *Recorder) RecordDelivery(queue string, d Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d.At = time.Now()
	r.deliveries[queue] = append(r.deliveries[queue], d)
}

// Checks says what a history is checked against.
type Checks struct {
	// DeadLetterQueues are the queues dead letters go to; a message
	// delivered from one of them died (its other deliveries are from
	// where it was published).
	DeadLetterQueues []string
	// MustDie are the ids that must each reach exactly one dead-letter
	// queue (those the test rejected or let expire, and were confirmed).
	MustDie []string
	// Ordered are the queues fed by one publisher and read by one consumer
	// without requeues: first deliveries must follow publish order.
	Ordered []string
}

// Report is the outcome of Check.
type Report struct {
	Published, Confirmed, Nacked, Delivered int
	// Overtaken counts the deliveries with redelivered=false recorded
	// after another delivery of their message from the queue, which the
	// broker may have sent first (the package doc): no violation.
	Overtaken int
	// Violations, one line each; none when the history is sound.
	Violations []string
}

// OK reports whether the history broke no rule.
func (rep Report) OK() bool { return len(rep.Violations) == 0 }

func (rep Report) String() string {
	s := fmt.Sprintf("%d published, %d confirmed, %d nacked, %d deliveries: ", rep.Published, rep.Confirmed, rep.Nacked, rep.Delivered)
	if rep.OK() {
		return s + fmt.Sprintf("0 lost, 0 phantom, 0 silent duplicates (%d overtaken), 0 duplicate dead letters, order kept", rep.Overtaken)
	}
	const most = 20
	v := rep.Violations
	more := ""
	if len(v) > most {
		v, more = v[:most], fmt.Sprintf("\n… and %d more", len(rep.Violations)-most)
	}
	return s + fmt.Sprintf("%d violations:\n", len(rep.Violations)) + strings.Join(v, "\n") + more
}

// Check checks the history recorded so far against c.
func (r *Recorder) Check(c Checks) Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{Published: len(r.published), Confirmed: len(r.confirmed), Nacked: len(r.nacked)}
	dlq := map[string]bool{}
	for _, q := range c.DeadLetterQueues {
		dlq[q] = true
	}
	seen := map[string]bool{}             // delivered anywhere
	deadIn := map[string]map[string]int{} // id -> dead-letter queue -> first deliveries
	queues := make([]string, 0, len(r.deliveries))
	for q := range r.deliveries {
		queues = append(queues, q)
	}
	sort.Strings(queues)
	for _, q := range queues {
		ds := r.deliveries[q]
		rep.Delivered += len(ds)
		got := map[string]bool{}          // delivered from q before
		firstAt := map[string]time.Time{} // when it was first received from q
		unflagged := map[string]bool{}    // delivered from q with redelivered=false before
		for _, d := range ds {
			if _, ok := r.published[d.ID]; !ok {
				rep.Violations = append(rep.Violations, fmt.Sprintf("phantom: %q delivered from %q, never published", d.ID, q))
				continue
			}
			seen[d.ID] = true
			if got[d.ID] && !d.Redelivered {
				// The package doc: what receipt times prove of the order
				// the broker sent the deliveries in.
				why := ""
				switch {
				case unflagged[d.ID]:
					why = "a second time"
				case d.NotBefore.IsZero():
					why = "after it was received"
				case firstAt[d.ID].Before(d.NotBefore):
					why = "to a consumer that asked after it was received"
				}
				if why != "" {
					rep.Violations = append(rep.Violations, fmt.Sprintf("silent duplicate: %q delivered again from %q without redelivered (%s); %s",
						d.ID, q, why, r.storyLocked(q, d.ID)))
				} else {
					rep.Overtaken++
				}
			}
			if !got[d.ID] {
				firstAt[d.ID] = d.At
			}
			if !d.Redelivered {
				unflagged[d.ID] = true
			}
			if !got[d.ID] && dlq[q] {
				if deadIn[d.ID] == nil {
					deadIn[d.ID] = map[string]int{}
				}
				deadIn[d.ID][q]++
			}
			got[d.ID] = true
		}
	}
	for _, id := range sortedKeys(r.confirmed) {
		if !seen[id] {
			rep.Violations = append(rep.Violations, fmt.Sprintf("lost: %q confirmed, never delivered", id))
		}
	}
	for _, id := range sortedKeys(deadIn) {
		if n := len(deadIn[id]); n > 1 {
			rep.Violations = append(rep.Violations, fmt.Sprintf("duplicate dead letter: %q reached %d dead-letter queues %v", id, n, sortedKeys(deadIn[id])))
		}
	}
	for _, id := range c.MustDie {
		if len(deadIn[id]) == 0 {
			rep.Violations = append(rep.Violations, fmt.Sprintf("dead letter lost: %q reached no dead-letter queue", id))
		}
	}
	for _, q := range c.Ordered {
		last, lastID := 0, ""
		got := map[string]bool{}
		for _, d := range r.deliveries[q] {
			seq, ok := r.published[d.ID]
			if !ok || got[d.ID] {
				continue
			}
			got[d.ID] = true
			if seq < last {
				rep.Violations = append(rep.Violations, fmt.Sprintf("order: %q delivered from %q after %q, published before it; %s; %q: %s",
					d.ID, q, lastID, r.storyLocked(q, d.ID), lastID, r.storyLocked(q, lastID)))
			}
			last, lastID = seq, d.ID
		}
	}
	return rep
}

// storyLocked tells what the history holds of id: when it was published,
// confirmed or nacked, and each delivery of it from q, in order, with its
// redelivered flag, time and consumer.
func (r *Recorder) storyLocked(q, id string) string {
	var b strings.Builder
	b.WriteString("published " + clock(r.publishedAt[id]))
	if at, ok := r.confirmedAt[id]; ok {
		b.WriteString(", confirmed " + clock(at))
	}
	if at, ok := r.nackedAt[id]; ok {
		b.WriteString(", nacked " + clock(at))
	}
	fmt.Fprintf(&b, "; deliveries from %q:", q)
	n := 0
	for _, d := range r.deliveries[q] {
		if d.ID != id {
			continue
		}
		n++
		fmt.Fprintf(&b, " #%d %s redelivered=%t", n, clock(d.At), d.Redelivered)
		var about []string
		if d.Via != "" {
			about = append(about, d.Via)
		}
		if !d.NotBefore.IsZero() {
			about = append(about, "asked "+clock(d.NotBefore))
		}
		if len(about) > 0 {
			b.WriteString(" (" + strings.Join(about, ", ") + ")")
		}
		b.WriteString(";")
	}
	return strings.TrimSuffix(b.String(), ";")
}

// clock formats t as a time of day to the millisecond, as the brokers'
// logs do ("-" for none).
func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("15:04:05.000")
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
