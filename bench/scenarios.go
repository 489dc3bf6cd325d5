package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// scenarioPublish: producers only; rate from first publish to last
// confirm; latency = confirm latency; the queue depth is checked against
// what was confirmed.
func (r *runner) scenarioPublish(ctx context.Context, res *result) (time.Duration, error) {
	q := r.id + "q"
	if err := r.declareQueue(q, nil); err != nil {
		return 0, err
	}
	r.confirmLatency = true
	elapsed, err := r.produceAll(ctx, "", []string{q}, nil)
	if err != nil {
		return 0, err
	}
	res.Msgs = r.published.Load()
	if r.o.confirm > 0 {
		res.Latency = "publish to confirm"
	}
	depth, err := r.queueDepth(q)
	if err != nil {
		return 0, err
	}
	if want := r.expected(); uint64(depth) < want {
		res.Lost = want - uint64(depth)
	} else {
		res.Duplicated = uint64(depth) - want
	}
	return elapsed, nil
}

// scenarioBacklog: fill a queue (rate = fill rate), then drain it with the
// consumers (drain rate) verifying every message.
func (r *runner) scenarioBacklog(ctx context.Context, res *result) (time.Duration, error) {
	q := r.id + "q"
	if err := r.declareQueue(q, nil); err != nil {
		return 0, err
	}
	r.confirmLatency = true
	elapsed, err := r.produceAll(ctx, "", []string{q}, nil)
	if err != nil {
		return 0, err
	}
	r.confirmLatency = false
	if r.rss != nil {
		if res.BrokerRSSFilledMiB, err = r.rss.nowMiB(); err != nil {
			return 0, err
		}
	}
	res.Msgs = r.published.Load()
	if r.o.confirm > 0 {
		res.Latency = "publish to confirm"
	}
	drain, err := r.drain(ctx, q, r.expected())
	if err != nil {
		return 0, err
	}
	if drain > 0 {
		res.DrainMsgsPerS = float64(r.received.Load()) / drain.Seconds()
	}
	r.verify(res, r.expected())
	return elapsed, nil
}

// drain consumes want messages from q and returns how long it took.
func (r *runner) drain(ctx context.Context, q string, want uint64) (time.Duration, error) {
	r.track = newTracker(r.o.producers)
	r.finishTarget(want)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	start := time.Now()
	if err := r.startConsumers(r.o.consumers, consumerSpec{queues: []string{q}, action: actAck, record: true}, stop, &wg); err != nil {
		return 0, err
	}
	r.awaitArrivals(ctx)
	return time.Since(start), nil
}

// prefill publishes n messages untimed (confirm window 1000) so consume
// can be measured alone.
func (r *runner) prefill(ctx context.Context, q string) error {
	saved := r.o
	r.o.confirm, r.o.rate, r.o.duration = 1000, 0, 0
	_, err := r.produceAll(ctx, "", []string{q}, nil)
	r.o = saved
	return err
}

// scenarioConsume: a pre-filled queue drained by the consumers.
func (r *runner) scenarioConsume(ctx context.Context, res *result) (time.Duration, error) {
	q := r.id + "q"
	if err := r.declareQueue(q, nil); err != nil {
		return 0, err
	}
	fmt.Fprintf(r.progress, "bench: pre-filling %d messages\n", r.o.n)
	if err := r.prefill(ctx, q); err != nil {
		return 0, err
	}
	r.sent.Store(0)
	elapsed, err := r.drain(ctx, q, r.expected())
	if err != nil {
		return 0, err
	}
	res.Msgs = r.received.Load()
	r.verify(res, r.expected())
	return elapsed, nil
}

// scenarioDrain: drains a queue an earlier run filled (publish -keep with
// the same -id, -n and -producers), verifying every message: the
// measurement of a backlog that survived a broker restart.
func (r *runner) scenarioDrain(ctx context.Context, res *result) (time.Duration, error) {
	q := r.id + "q"
	if err := r.declareQueue(q, nil); err != nil {
		return 0, err
	}
	want := uint64(r.o.n)
	elapsed, err := r.drain(ctx, q, want)
	if err != nil {
		return 0, err
	}
	res.Msgs = r.received.Load()
	r.verify(res, want)
	return elapsed, nil
}

// concurrent runs producers to (exchange, key) while consumers (started
// first by startConsumers) record arrivals; it returns the time from the
// first publish to the last arrival.
func (r *runner) concurrent(ctx context.Context, exchange, key string, stamp stampFunc, arrivalsPerMsg uint64) (time.Duration, error) {
	start := time.Now()
	if _, err := r.produceAll(ctx, exchange, []string{key}, stamp); err != nil {
		return 0, err
	}
	r.finishTarget(r.expected() * arrivalsPerMsg)
	r.awaitArrivals(ctx)
	return time.Since(start), nil
}

// scenarioE2E: producers and consumers together; latency from the send
// time in the body to arrival.
func (r *runner) scenarioE2E(ctx context.Context, res *result) (time.Duration, error) {
	q := r.id + "q"
	if err := r.declareQueue(q, nil); err != nil {
		return 0, err
	}
	r.track = newTracker(r.o.producers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	if err := r.startConsumers(r.o.consumers, consumerSpec{queues: []string{q}, action: actAck, record: true, latency: sinceSent}, stop, &wg); err != nil {
		return 0, err
	}
	elapsed, err := r.concurrent(ctx, "", q, nil, 1)
	if err != nil {
		return 0, err
	}
	res.Msgs = r.received.Load()
	res.Latency = "publish to delivery"
	r.verify(res, r.expected())
	return elapsed, nil
}

// scenarioFanout: one fanout exchange bound to -queues queues, one
// consumer each; every queue must get every message.
func (r *runner) scenarioFanout(ctx context.Context, res *result) (time.Duration, error) {
	x := r.id + "fanout"
	if err := r.ach.ExchangeDeclare(x, "fanout", r.o.durable, false, false, false, nil); err != nil {
		return 0, fmt.Errorf("declare exchange: %w", err)
	}
	r.exchanges = append(r.exchanges, x)
	// One tracker per queue, folded into the arrival count.
	r.track = newTracker(r.o.producers * r.o.queues)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	for i := 0; i < r.o.queues; i++ {
		q := r.id + "q" + strconv.Itoa(i)
		if err := r.declareQueue(q, nil); err != nil {
			return 0, err
		}
		if err := r.ach.QueueBind(q, "", x, false, nil); err != nil {
			return 0, fmt.Errorf("bind %s: %w", q, err)
		}
		spec := consumerSpec{queues: []string{q}, action: actAck, record: true, latency: sinceSent, slot: i * r.o.producers}
		if err := r.startConsumers(1, spec, stop, &wg); err != nil {
			return 0, err
		}
	}
	elapsed, err := r.concurrent(ctx, x, "", nil, uint64(r.o.queues))
	if err != nil {
		return 0, err
	}
	res.Msgs = r.expected()
	res.Queues = r.o.queues
	if elapsed > 0 {
		res.DeliveriesPerS = float64(r.received.Load()) / elapsed.Seconds()
	}
	res.Latency = "publish to delivery (each copy)"
	r.verify(res, r.expected()*uint64(r.o.queues))
	return elapsed, nil
}

// dlxSource declares a source queue dead-lettering through the default
// exchange into a DLQ, with extra arguments; it returns both names.
func (r *runner) dlxSource(args amqp091.Table) (src, dlq string, err error) {
	src, dlq = r.id+"src", r.id+"dlq"
	if err := r.declareQueue(dlq, nil); err != nil {
		return "", "", err
	}
	if args == nil {
		args = amqp091.Table{}
	}
	args["x-dead-letter-exchange"] = ""
	args["x-dead-letter-routing-key"] = dlq
	if err := r.declareQueue(src, args); err != nil {
		return "", "", err
	}
	return src, dlq, nil
}

// scenarioDLXReject: consumers reject everything from the source; the
// DLQ must receive every message. Latency = publish to arrival in the DLQ.
func (r *runner) scenarioDLXReject(ctx context.Context, res *result) (time.Duration, error) {
	src, dlq, err := r.dlxSource(nil)
	if err != nil {
		return 0, err
	}
	r.track = newTracker(r.o.producers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	if err := r.startConsumers(1, consumerSpec{queues: []string{dlq}, action: actAck, record: true, latency: sinceSent}, stop, &wg); err != nil {
		return 0, err
	}
	if err := r.startConsumers(r.o.consumers, consumerSpec{queues: []string{src}, action: actReject, record: false}, stop, &wg); err != nil {
		return 0, err
	}
	elapsed, err := r.concurrent(ctx, "", src, nil, 1)
	if err != nil {
		return 0, err
	}
	res.Msgs = r.received.Load()
	res.Latency = "publish to arrival in the DLQ"
	r.verify(res, r.expected())
	return elapsed, nil
}

// scenarioTTL: messages expire from an unconsumed source into a DLQ;
// latency = arrival in the DLQ minus the deadline (lateness).
func (r *runner) scenarioTTL(ctx context.Context, res *result) (time.Duration, error) {
	var args amqp091.Table
	var ttl stampFunc
	base := uint32(r.o.ttl / time.Millisecond)
	if r.o.ttlMode == "queue" {
		args = amqp091.Table{"x-message-ttl": int64(base)}
		ttl = func(int, time.Time) pubExtra { return pubExtra{ttlMS: base} }
	} else {
		span := uint32((r.o.ttlMax - r.o.ttl) / time.Millisecond)
		ttl = func(int, time.Time) pubExtra {
			ms := base
			if span > 0 {
				ms += rand.Uint32N(span + 1)
			}
			return pubExtra{ttlMS: ms, expiration: strconv.FormatUint(uint64(ms), 10)}
		}
	}
	src, dlq, err := r.dlxSource(args)
	if err != nil {
		return 0, err
	}
	r.track = newTracker(r.o.producers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	lateness := func(info bodyInfo, now time.Time) float64 {
		deadline := info.sent.Add(time.Duration(info.ttlMS) * time.Millisecond)
		return float64(now.Sub(deadline)) / 1e6
	}
	if err := r.startConsumers(1, consumerSpec{queues: []string{dlq}, action: actAck, record: true, latency: lateness}, stop, &wg); err != nil {
		return 0, err
	}
	elapsed, err := r.concurrent(ctx, "", src, ttl, 1)
	if err != nil {
		return 0, err
	}
	res.Msgs = r.received.Load()
	res.Latency = "arrival in the DLQ minus the TTL deadline"
	r.verify(res, r.expected())
	return elapsed, nil
}

// scenarioMaxLen: publish into a source with x-max-length (drop-head) and
// a DLX; the DLQ gets the overflow, the source keeps max-length; every
// message must be in exactly one of them.
func (r *runner) scenarioMaxLen(ctx context.Context, res *result) (time.Duration, error) {
	src, dlq, err := r.dlxSource(amqp091.Table{"x-max-length": int64(r.o.maxLength), "x-overflow": "drop-head"})
	if err != nil {
		return 0, err
	}
	r.track = newTracker(r.o.producers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	if err := r.startConsumers(1, consumerSpec{queues: []string{dlq}, action: actAck, record: true, latency: sinceSent}, stop, &wg); err != nil {
		return 0, err
	}
	start := time.Now()
	if _, err := r.produceAll(ctx, "", []string{src}, nil); err != nil {
		return 0, err
	}
	total := r.expected()
	overflow := uint64(0)
	if total > uint64(r.o.maxLength) {
		overflow = total - uint64(r.o.maxLength)
	}
	r.finishTarget(overflow)
	r.awaitArrivals(ctx)
	elapsed := time.Since(start)
	depth, err := r.queueDepth(src)
	if err != nil {
		return 0, err
	}
	if depth != int(total-overflow) {
		fmt.Fprintf(r.progress, "bench: source holds %d messages, want %d\n", depth, total-overflow)
	}
	// Drain the source so every message is accounted for.
	r.finishTarget(total)
	if err := r.startConsumers(1, consumerSpec{queues: []string{src}, action: actAck, record: true}, stop, &wg); err != nil {
		return 0, err
	}
	r.awaitArrivals(ctx)
	res.Msgs = total
	res.Latency = "publish to arrival in the DLQ"
	r.verify(res, total)
	return elapsed, nil
}
