package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The delayed scenario measures scheduled delivery through an
// x-delayed-message exchange (x-delayed-type direct, durable with
// -durable/-persistent) bound to one queue. Each message is due a random
// delay after it is sent, uniform in [-delay-min, -delay-max] (whole ms,
// from -seed: the same delays in every run), carried in the body's ttl
// field with the send time; the header that asks for it is
// -delay-header's:
//
//   - x-delivery-time (the default): the absolute due time, the send time
//     in Unix ms plus the delay. The broker's due time is then exactly
//     the one the consumer computes, so lateness and "early" are exact.
//   - x-delay: the delay (the plugin's header). The broker counts it from
//     the message's arrival, after the send, so the consumer's due time
//     (send time + delay) is a lower bound of the broker's: lateness
//     includes the publish's transit, and a delivery before it is
//     certainly early.
//
// Latency is the lateness, delivery to the consumer minus the due time;
// res.Early counts deliveries before their due time (the run fails if any
// is). With -background, a producer/consumer pair runs an e2e at
// -background-rate on a queue of its own through the default exchange
// for the whole run (its own rate, latency and losses are reported).
//
// With -hold, the scenario only publishes (every message must be due
// after the run: the scale runs of bench/delayed.sh, delays of hours) and
// checks that the bound queue got none of them (any there would be
// early); with -keep the exchange keeps them, for a restart.

// delayHeaders are the -delay-header values.
var delayHeaders = []string{"x-delivery-time", "x-delay"}

// scenarioDelayed: see above.
func (r *runner) scenarioDelayed(ctx context.Context, res *result) (time.Duration, error) {
	x, q := r.id+"delayed", r.id+"q"
	args := amqp091.Table{"x-delayed-type": "direct"}
	if err := r.ach.ExchangeDeclare(x, "x-delayed-message", r.o.durable, false, false, false, args); err != nil {
		return 0, fmt.Errorf("declare exchange %s: %w", x, err)
	}
	r.exchanges = append(r.exchanges, x)
	if err := r.declareQueue(q, nil); err != nil {
		return 0, err
	}
	if err := r.ach.QueueBind(q, q, x, false, nil); err != nil {
		return 0, fmt.Errorf("bind %s: %w", q, err)
	}
	stamp := r.delayStamp()
	res.Latency = "delivery minus due time (lateness)"
	if r.o.hold {
		return r.delayedHold(ctx, res, x, q, stamp)
	}

	r.track = newTracker(r.o.producers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	if r.o.background {
		bg, err := r.startBackground(ctx, stop, &wg)
		if err != nil {
			return 0, err
		}
		defer func() { bg.finish(res) }()
	}
	var early atomic.Uint64
	lateness := func(info bodyInfo, now time.Time) float64 { return r.lateness(info, now, &early) }
	spec := consumerSpec{queues: []string{q}, action: actAck, record: true, latency: lateness}
	if err := r.startConsumers(r.o.consumers, spec, stop, &wg); err != nil {
		return 0, err
	}
	elapsed, err := r.concurrent(ctx, x, q, stamp, 1)
	if err != nil {
		return 0, err
	}
	res.Msgs = r.received.Load()
	res.Early = early.Load()
	r.verify(res, r.expected())
	return elapsed, nil
}

// delayStamp returns the scenario's stampFunc: each producer draws its
// delays from its own generator, seeded by -seed and its number.
func (r *runner) delayStamp() stampFunc {
	rngs := make([]*rand.Rand, r.o.producers)
	for p := range rngs {
		rngs[p] = rand.New(rand.NewPCG(r.o.seed, uint64(p)))
	}
	lo, hi := r.o.delayMin.Milliseconds(), r.o.delayMax.Milliseconds()
	header := r.o.delayHeader
	return func(p int, sent time.Time) pubExtra {
		d := lo + rngs[p].Int64N(hi-lo+1)
		v := d // x-delay
		if header == "x-delivery-time" {
			v = sent.UnixMilli() + d
		}
		return pubExtra{ttlMS: uint32(d), header: header, headerValue: v}
	}
}

// dueTime is the due time of a delayed message as its body tells it (see
// the scenario's comment on how exact it is).
func (r *runner) dueTime(info bodyInfo) time.Time {
	d := int64(info.ttlMS)
	if r.o.delayHeader == "x-delivery-time" {
		return time.UnixMilli(info.sent.UnixMilli() + d)
	}
	return info.sent.Add(time.Duration(d) * time.Millisecond)
}

// lateness returns how late (ms) a delayed message delivered at now came,
// counting it in early if it came before its due time.
func (r *runner) lateness(info bodyInfo, now time.Time, early *atomic.Uint64) float64 {
	ms := float64(now.Sub(r.dueTime(info))) / 1e6
	if ms < 0 {
		early.Add(1)
	}
	return ms
}

// delayedHold publishes every message (none due during the run) and
// checks that the bound queue q got none. The duration is the publish's.
func (r *runner) delayedHold(ctx context.Context, res *result, x, q string, stamp stampFunc) (time.Duration, error) {
	r.confirmLatency = true
	elapsed, err := r.produceAll(ctx, x, []string{q}, stamp)
	if err != nil {
		return 0, err
	}
	r.confirmLatency = false
	res.Msgs = r.published.Load()
	res.Latency = "publish to confirm (held: none delivered)"
	depth, err := r.queueDepth(q)
	if err != nil {
		return 0, err
	}
	res.Early = uint64(depth) // all are due after the run
	return elapsed, nil
}

// background is the -background pair: its own runner (counters, tracker,
// latencies) publishing to its own queue at -background-rate.
type background struct {
	r     *runner
	start time.Time
	stop  context.CancelFunc
	done  chan error // the producer's end
	err   error
}

// startBackground declares the pair's queue, starts its consumer (which
// stop ends, wg counting it) and its producer (which finish ends).
func (r *runner) startBackground(ctx context.Context, stop <-chan struct{}, wg *sync.WaitGroup) (*background, error) {
	q := r.id + "bg"
	if err := r.declareQueue(q, nil); err != nil {
		return nil, err
	}
	o := r.o
	o.rate, o.producers, o.consumers, o.n, o.duration = o.backgroundRate, 1, 1, 0, 0
	br := &runner{o: o, id: r.id, progress: io.Discard, perProd: make([]atomic.Uint64, 1), notify: make(chan struct{}, 1)}
	br.track = newTracker(1)
	spec := consumerSpec{queues: []string{q}, action: actAck, record: true, latency: sinceSent}
	if err := br.startConsumers(1, spec, stop, wg); err != nil {
		return nil, fmt.Errorf("background: %w", err)
	}
	pctx, cancel := context.WithCancel(ctx)
	bg := &background{r: br, start: time.Now(), stop: cancel, done: make(chan error, 1)}
	go func() { bg.done <- br.produce(pctx, 0, -1, time.Time{}, "", []string{q}, nil) }()
	return bg, nil
}

// finish stops the pair's producer, waits (up to 30 s) for its consumer
// to receive what was confirmed, and puts the pair's figures in res.
func (bg *background) finish(res *result) {
	bg.stop()
	err := <-bg.done
	elapsed := time.Since(bg.start)
	br := bg.r
	// The producer stops when its context ends, mid-publish perhaps
	// (amqp091's publish then fails with the context's error): what it
	// had confirmed is the count.
	if err != nil && !errors.Is(err, context.Canceled) {
		res.BackgroundError = err.Error()
	}
	br.finishTarget(br.expected())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	br.awaitArrivals(ctx)
	cancel()
	var v result
	br.verify(&v, br.expected())
	res.BackgroundRate = br.o.rate
	res.BackgroundMsgsPerS = float64(br.received.Load()) / elapsed.Seconds()
	res.BackgroundP50MS, res.BackgroundP99MS, res.BackgroundMaxMS = br.lat.summary()
	res.BackgroundLost, res.BackgroundDuplicated = v.Lost, v.Duplicated
}
