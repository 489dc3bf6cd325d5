package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strings"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The checker consumes every queue on the broker the messages moved to
// and holds each delivery against the ledger: every confirmed number of
// every stream must be there (else lost); a number may come more than
// once only if every copy but one is marked redelivered (else an unmarked
// duplicate); a message must be in the queue it was published to, with
// its body, headers and properties as sent.

// checkConfig is what check is told.
type checkConfig struct {
	url      string
	queues   []string
	prefetch int
	timeout  time.Duration // for the whole consume
	log      io.Writer     // every queue's consumer writes to it: safe for concurrent use
	// markerHeader, if set, is a header that marks a copy as redelivered
	// besides the delivery's redelivered flag (a shovel that carries the
	// source's redelivered flag forward in a header).
	markerHeader string
}

// bitset is a growable set of sequence numbers.
type bitset []uint64

func (b *bitset) has(i uint64) bool { return i/64 < uint64(len(*b)) && (*b)[i/64]&(1<<(i%64)) != 0 }
func (b *bitset) set(i uint64) {
	for i/64 >= uint64(len(*b)) {
		*b = append(*b, make([]uint64, len(*b)+1)...)
	}
	(*b)[i/64] |= 1 << (i % 64)
}

// arrivals are one stream's deliveries: any copy, and an unmarked copy.
type arrivals struct{ any, unmarked bitset }

// queueResult is one queue's counts.
type queueResult struct {
	Name       string `json:"name"`
	Deliveries uint64 `json:"deliveries"`
	Unique     uint64 `json:"unique"`
	Confirmed  uint64 `json:"confirmed"`
	Lost       uint64 `json:"lost"`
	Duplicates uint64 `json:"duplicates"`
	Left       int    `json:"left"` // ready in the queue after the consume (0 unless something still publishes)
}

// checkResult is check's JSON line.
type checkResult struct {
	// Confirmed is what the producers had confirmed (fill and live): each
	// must arrive. Unconfirmed were nacked or in flight when a connection
	// failed or a run stopped: they may arrive (UnconfirmedArrived).
	Confirmed          uint64 `json:"confirmed"`
	Unconfirmed        uint64 `json:"unconfirmed"`
	Deliveries         uint64 `json:"deliveries"`
	Unique             uint64 `json:"unique"`
	Lost               uint64 `json:"lost"`
	DuplicatesMarked   uint64 `json:"duplicates_redelivered"` // extra copies marked redelivered
	DuplicatesUnmarked uint64 `json:"duplicates_unmarked"`    // extra copies not marked: a failure
	// DuplicatesUnmarkedShovelled are the unmarked extra copies of
	// messages published to RabbitMQ: forwarded twice by a shovel (a
	// publish brokerd stored but whose confirm the shovel never got, across
	// a kill), as opposed to a producer's.
	DuplicatesUnmarkedShovelled uint64 `json:"duplicates_unmarked_shovelled"`
	UnconfirmedArrived          uint64 `json:"unconfirmed_arrived"`
	Strays                      uint64 `json:"strays"`    // not migration messages, or numbers never published
	Altered                     uint64 `json:"altered"`   // body, headers or properties not as sent
	Misrouted                   uint64 `json:"misrouted"` // in another queue than the one published to
	// ViaRabbitMQ are the unique messages published to RabbitMQ (so moved
	// by the shovels); ViaBrokerd, those the producers published to
	// brokerd after the switch.
	ViaRabbitMQ uint64 `json:"via_rabbitmq"`
	ViaBrokerd  uint64 `json:"via_brokerd"`
	// Examples, a few of each failure.
	LostExamples    []string      `json:"lost_examples,omitempty"`
	AlteredExamples []string      `json:"altered_examples,omitempty"`
	Queues          []queueResult `json:"queues"`
	ConsumeS        float64       `json:"consume_s"`
	// The move's figures, from the times the script passes (0 if not).
	MoveS          float64 `json:"move_s,omitempty"`
	ShovelS        float64 `json:"shovel_s,omitempty"`
	ShovelMsgsPerS float64 `json:"shovel_msgs_per_s,omitempty"`
}

func (r *checkResult) failed() bool {
	return r.Lost > 0 || r.DuplicatesUnmarked > 0 || r.Strays > 0 || r.Altered > 0 || r.Misrouted > 0
}

// why says what failed.
func (r *checkResult) why() string {
	var w []string
	if r.Lost > 0 {
		w = append(w, fmt.Sprintf("%d confirmed messages lost (e.g. %s)", r.Lost, strings.Join(r.LostExamples, ", ")))
	}
	if r.DuplicatesUnmarked > 0 {
		w = append(w, fmt.Sprintf("%d extra copies not marked redelivered, %d of them of messages the shovels moved", r.DuplicatesUnmarked, r.DuplicatesUnmarkedShovelled))
	}
	if r.Altered > 0 {
		w = append(w, fmt.Sprintf("%d altered (%s)", r.Altered, strings.Join(r.AlteredExamples, "; ")))
	}
	if r.Misrouted > 0 {
		w = append(w, fmt.Sprintf("%d in another queue than the one published to", r.Misrouted))
	}
	if r.Strays > 0 {
		w = append(w, fmt.Sprintf("%d strays (not published by this run)", r.Strays))
	}
	return strings.Join(w, "; ")
}

// tally is the deliveries so far, shared by the queues' consumers.
type tally struct {
	mu       sync.Mutex
	streams  map[[2]int]*arrivals // (producer, queue)
	res      checkResult
	perQueue []queueResult
}

func (t *tally) record(cfg checkConfig, q int, d *amqp091.Delivery) {
	m, err := parseMessage(d)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.res.Deliveries++
	t.perQueue[q].Deliveries++
	switch {
	case errors.Is(err, errNotOurs):
		t.res.Strays++
		return
	case err != nil:
		t.res.Altered++
		if len(t.res.AlteredExamples) < 5 {
			t.res.AlteredExamples = append(t.res.AlteredExamples, fmt.Sprintf("%s: %v", d.MessageId, err))
		}
		if m.producer >= len(producerNames) || m.queue >= len(t.perQueue) {
			return
		}
	}
	if m.queue != q {
		t.res.Misrouted++
	}
	if m.queue >= len(t.perQueue) {
		return
	}
	key := [2]int{m.producer, m.queue}
	a := t.streams[key]
	if a == nil {
		a = &arrivals{}
		t.streams[key] = a
	}
	marked := d.Redelivered
	if cfg.markerHeader != "" {
		if v, ok := d.Headers[cfg.markerHeader]; ok && v != false {
			marked = true
		}
	}
	if a.any.has(m.seq) {
		t.perQueue[m.queue].Duplicates++
		if !marked && a.unmarked.has(m.seq) {
			t.res.DuplicatesUnmarked++
			if m.via == "rabbitmq" {
				t.res.DuplicatesUnmarkedShovelled++
			}
		} else {
			t.res.DuplicatesMarked++
		}
	} else {
		a.any.set(m.seq)
		t.res.Unique++
		t.perQueue[m.queue].Unique++
		if m.via == "rabbitmq" {
			t.res.ViaRabbitMQ++
		} else {
			t.res.ViaBrokerd++
		}
	}
	if !marked {
		a.unmarked.set(m.seq)
	}
}

// check consumes every queue of cfg on cfg.url and holds the deliveries
// against l. The queues must not be published to meanwhile.
func check(ctx context.Context, cfg checkConfig, l *ledger) (checkResult, error) {
	t := &tally{streams: map[[2]int]*arrivals{}, perQueue: make([]queueResult, len(cfg.queues))}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(cfg.queues))
	for q, name := range cfg.queues {
		t.perQueue[q].Name = name
		wg.Add(1)
		go func() {
			defer wg.Done()
			left, err := consumeQueue(ctx, cfg, t, q)
			t.mu.Lock()
			t.perQueue[q].Left = left
			t.mu.Unlock()
			errs[q] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return checkResult{}, err
	}
	res := t.res
	res.ConsumeS = time.Since(start).Seconds()
	res.Queues = t.perQueue
	for _, s := range l.Streams {
		p := -1
		for i, n := range producerNames {
			if n == s.Producer {
				p = i
			}
		}
		if p < 0 || s.Queue >= len(res.Queues) {
			return res, fmt.Errorf("the state file has a stream %s/%d this check does not know", s.Producer, s.Queue)
		}
		a := t.streams[[2]int{p, s.Queue}]
		if a == nil {
			a = &arrivals{}
		}
		res.Unconfirmed += s.Unconfirmed + s.Nacked
		confirmed := s.Confirmed.count()
		res.Confirmed += confirmed
		res.Queues[s.Queue].Confirmed += confirmed
		for _, r := range s.Confirmed {
			for seq := r[0]; seq < r[1]; seq++ {
				if !a.any.has(seq) {
					res.Lost++
					res.Queues[s.Queue].Lost++
					if len(res.LostExamples) < 10 {
						res.LostExamples = append(res.LostExamples, messageID(s.Queue, p, seq))
					}
				}
			}
		}
		// What arrived and was not confirmed: fine below Next (it may have
		// been stored before its connection failed), a stray at or above.
		for i, w := range a.any {
			for w != 0 {
				bit := uint64(i)*64 + uint64(bits.TrailingZeros64(w))
				w &= w - 1
				switch {
				case bit >= s.Next:
					res.Strays++
				case !s.Confirmed.has(bit):
					res.UnconfirmedArrived++
				}
			}
		}
		delete(t.streams, [2]int{p, s.Queue})
	}
	for _, a := range t.streams { // streams the ledger does not have: all strays
		for _, w := range a.any {
			res.Strays += uint64(bits.OnesCount64(w))
		}
	}
	return res, nil
}

// consumeQueue takes every message queue q holds when it starts (manual
// acks, acked in batches) and returns how many are ready after.
func consumeQueue(ctx context.Context, cfg checkConfig, t *tally, q int) (int, error) {
	name := cfg.queues[q]
	conn, err := amqp091.Dial(cfg.url)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("open channel: %w", err)
	}
	st, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("queue %s: %w", name, err)
	}
	if st.Messages > 0 {
		if err := ch.Qos(cfg.prefetch, 0, false); err != nil {
			return 0, fmt.Errorf("basic.qos: %w", err)
		}
		ds, err := ch.ConsumeWithContext(ctx, name, "migrate-check", false, false, false, false, nil)
		if err != nil {
			return 0, fmt.Errorf("consume %s: %w", name, err)
		}
		for got, unacked := 0, 0; got < st.Messages; {
			select {
			case d, ok := <-ds:
				if !ok {
					return 0, fmt.Errorf("consume %s: the channel closed after %d of %d", name, got, st.Messages)
				}
				t.record(cfg, q, &d)
				got++
				if unacked++; unacked >= cfg.prefetch/2 || got == st.Messages {
					if err := d.Ack(true); err != nil {
						return 0, fmt.Errorf("ack on %s: %w", name, err)
					}
					unacked = 0
				}
			case <-ctx.Done():
				return 0, fmt.Errorf("consume %s: %d of %d after %v: %w", name, got, st.Messages, cfg.timeout, ctx.Err())
			}
		}
		if err := ch.Cancel("migrate-check", false); err != nil {
			return 0, fmt.Errorf("cancel on %s: %w", name, err)
		}
	}
	st, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("queue %s: %w", name, err)
	}
	fmt.Fprintf(cfg.log, "migrate: check: %s done, %d ready left\n", name, st.Messages)
	return st.Messages, nil
}
