package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The retry scenario: every message fails k times (k uniform in
// 1..-retry-failures, fixed per message) before its consumer acks it, and
// waits out a backoff before each retry: the delay of the f-th retry is
// -retry-min × f (linear, -retry-multiplier 0) or -retry-min ×
// multiplier^(f-1), capped at -retry-max — brokerd's and LavinMQ's
// formula. How the message waits is -retry-via:
//
//   - native: the broker's own delayed retry: the work queue has
//     x-delayed-retry-type all, -min, -max (and -multiplier), the consumer
//     rejects with requeue=true and reads the count from x-delivery-count
//     (brokerd; RabbitMQ 4.3 quorum queues; LavinMQ);
//   - ttl-dlx: the pattern deployed on RabbitMQ before 4.3: the consumer
//     republishes the message to one wait queue with a per-message
//     expiration (the delay) and a header x-retries (the count), then acks
//     it; the wait queue has no consumer and dead-letters expired
//     messages back to the work queue. RabbitMQ expires a message only at
//     the head of a queue, so a short delay waits behind a longer one
//     published before it;
//   - ttl-dlx-levels: the same with one wait queue per delay
//     (x-message-ttl), which avoids that blocking at the cost of a queue
//     per level.
//
// Measured: the lateness of each retry (its redelivery minus its due
// time: the time just before the reject or republish plus the delay),
// the time from the first publish to the last ack, the rate of the whole
// run, and that every message was acked once, after exactly k failures.

// retryVias are the values of -retry-via.
var retryVias = []string{"native", "ttl-dlx", "ttl-dlx-levels"}

// retryHeader carries the count of failures so far in the TTL + DLX
// patterns, where the client keeps it.
const retryHeader = "x-retries"

// retryDelay is the backoff before the f-th retry (f ≥ 1).
func retryDelay(o options, f int) time.Duration {
	d := o.retryMin * time.Duration(f)
	if o.retryMult > 0 {
		d = o.retryMin
		for i := 1; i < f && d < o.retryMax; i++ {
			d *= time.Duration(o.retryMult)
		}
	}
	return min(d, o.retryMax)
}

// retryFailures is how often message idx fails: uniform in 1..most, a
// fixed draw per message (splitmix64 of its index), so that every broker
// gets the same work.
func retryFailures(idx, most int) int {
	z := uint64(idx) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return 1 + int(z%uint64(most))
}

// retryMsg is what the consumers know of one message.
type retryMsg struct {
	next int   // failures the next delivery should carry
	due  int64 // unix ns the pending retry is due
	done bool  // acked after its last failure
}

// retryState is the run's ledger, shared by its consumers.
type retryState struct {
	mu         sync.Mutex
	msgs       []retryMsg
	deliveries atomic.Uint64
	retries    atomic.Uint64 // redeliveries (lateness samples)
	dup        atomic.Uint64 // deliveries out of turn: a copy, or a count that skipped
}

func (r *runner) scenarioRetry(ctx context.Context, res *result) (time.Duration, error) {
	o := r.o
	work, wait := r.id+"work", r.id+"wait"
	waits := map[time.Duration]string{} // ttl-dlx-levels: delay -> its wait queue
	dlx := func(ttl time.Duration) amqp091.Table {
		t := amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": work}
		if ttl > 0 {
			t["x-message-ttl"] = ttl.Milliseconds()
		}
		return t
	}
	switch o.retryVia {
	case "native":
		args := amqp091.Table{"x-delayed-retry-type": "all", "x-delayed-retry-min": o.retryMin.Milliseconds(),
			"x-delayed-retry-max": o.retryMax.Milliseconds()}
		if o.retryMult > 0 {
			args["x-delayed-retry-multiplier"] = int64(o.retryMult)
		}
		if err := r.declareQueue(work, args); err != nil {
			return 0, err
		}
	case "ttl-dlx":
		if err := r.declareQueue(work, nil); err != nil {
			return 0, err
		}
		if err := r.declareQueue(wait, dlx(0)); err != nil {
			return 0, err
		}
	case "ttl-dlx-levels":
		if err := r.declareQueue(work, nil); err != nil {
			return 0, err
		}
		for f := 1; f <= o.retryFailures; f++ {
			d := retryDelay(o, f)
			if _, ok := waits[d]; ok {
				continue
			}
			waits[d] = r.id + "wait-" + strconv.FormatInt(d.Milliseconds(), 10)
			if err := r.declareQueue(waits[d], dlx(d)); err != nil {
				return 0, err
			}
		}
	}
	// A message's index is seq × producers + producer (produceAll).
	st := &retryState{msgs: make([]retryMsg, o.n+o.producers)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	ready := make(chan error, o.consumers)
	for range o.consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.retryConsumer(ctx, st, work, wait, waits, stop, ready)
		}()
	}
	for range o.consumers {
		if err := <-ready; err != nil {
			return 0, err
		}
	}
	start := time.Now()
	if _, err := r.produceAll(ctx, "", []string{work}, nil); err != nil {
		return 0, err
	}
	r.finishTarget(r.expected())
	r.awaitArrivals(ctx)
	elapsed := time.Since(start)
	res.Msgs = r.received.Load()
	res.RetryVia = o.retryVia
	res.Retries = st.retries.Load()
	res.DeliveriesPerS = float64(st.deliveries.Load()) / elapsed.Seconds()
	res.Latency = "retry lateness: redelivery minus due time (reject or republish + backoff)"
	if want := r.expected(); res.Msgs < want {
		res.Lost = want - res.Msgs
	}
	res.Duplicated = st.dup.Load() + r.strays.Load()
	return elapsed, nil
}

// retryConsumer is one consuming connection of the retry scenario (one
// channel, amqp091-go, prefetch -prefetch): it fails each message as its
// draw says, the way -retry-via says, and acks it after its last failure.
func (r *runner) retryConsumer(ctx context.Context, st *retryState, work, wait string, waits map[time.Duration]string,
	stop <-chan struct{}, ready chan<- error) {
	o := r.o
	conn, err := amqp091.Dial(o.url)
	if err != nil {
		ready <- fmt.Errorf("consumer: connect: %w", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(o.prefetch, 0, false)
	}
	var deliveries <-chan amqp091.Delivery
	if err == nil {
		deliveries, err = ch.Consume(work, "", false, false, false, false, nil)
	}
	if err != nil {
		ready <- fmt.Errorf("consumer: %w", err)
		return
	}
	ready <- nil
	mode := amqp091.Transient
	if o.persistent {
		mode = amqp091.Persistent
	}
	for {
		var d amqp091.Delivery
		var ok bool
		select {
		case d, ok = <-deliveries:
		case <-stop:
			return
		}
		if !ok {
			return
		}
		st.deliveries.Add(1)
		now := time.Now()
		info, err := parseBody(d.Body)
		idx := int(info.seq)*o.producers + info.producer
		if err != nil || idx < 0 || idx >= len(st.msgs) {
			r.strays.Add(1)
			d.Ack(false)
			continue
		}
		f := retryCount(d, o.retryVia)
		k := retryFailures(idx, o.retryFailures)
		st.mu.Lock()
		m := &st.msgs[idx]
		if m.done || f != m.next {
			st.mu.Unlock()
			st.dup.Add(1)
			d.Ack(false)
			continue
		}
		if f > 0 {
			r.lat.add(float64(now.UnixNano()-m.due) / 1e6)
			st.retries.Add(1)
		}
		m.next++
		var delay time.Duration
		if f < k {
			delay = retryDelay(o, f+1)
			m.due = time.Now().Add(delay).UnixNano()
		} else {
			m.done = true
		}
		st.mu.Unlock()
		switch {
		case f >= k:
			err = d.Ack(false)
			r.arrived()
		case o.retryVia == "native":
			err = d.Reject(true)
		default:
			p := amqp091.Publishing{Body: d.Body, DeliveryMode: mode, Headers: amqp091.Table{retryHeader: int64(f + 1)}}
			q := waits[delay]
			if o.retryVia == "ttl-dlx" {
				q, p.Expiration = wait, strconv.FormatInt(delay.Milliseconds(), 10)
			}
			if err = ch.PublishWithContext(ctx, "", q, false, false, p); err == nil {
				err = d.Ack(false)
			}
		}
		if err != nil {
			fmt.Fprintf(r.progress, "bench: retry consumer: %v\n", err)
			return
		}
	}
}

// retryCount reads the failures so far a delivery carries: the broker's
// x-delivery-count with native retries, the client's own header
// otherwise; absent on the first delivery.
func retryCount(d amqp091.Delivery, via string) int {
	key := retryHeader
	if via == "native" {
		key = "x-delivery-count"
	}
	switch v := d.Headers[key].(type) {
	case int64:
		return int(v)
	case int32:
		return int(v)
	case int16:
		return int(v)
	case int8:
		return int(v)
	}
	return 0
}
