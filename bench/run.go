package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// runner holds one run's connections, counters and verification state.
type runner struct {
	o  options
	id string // prefix of every queue and exchange this run creates
	// progress takes the run's progress lines, from the scenario and the
	// once-a-second reporter at once: a lockedWriter.
	progress io.Writer

	admin *amqp091.Connection
	ach   *amqp091.Channel

	queues    []string
	exchanges []string

	sent      atomic.Uint64 // publishes handed to the client library
	published atomic.Uint64 // publishes confirmed (or sent, without confirms)
	nacked    atomic.Uint64
	received  atomic.Uint64 // unique arrivals
	strays    atomic.Uint64 // deliveries that are not benchmark messages
	perProd   []atomic.Uint64

	lat   latencies
	track *tracker
	// confirmLatency makes producers record publish-to-confirm latency
	// (the publish-only scenarios); otherwise latency is measured on
	// arrival.
	confirmLatency bool

	target atomic.Uint64 // arrivals that end the wait; 0 = not known yet
	notify chan struct{} // signalled when arrivals may have reached target

	// rss samples the broker's RSS (nil without -broker-pid).
	rss *rssSampler

	// atEnd runs after the scenario, once the broker's RSS at the end was
	// sampled (idle-conns closes its connections there).
	atEnd []func()
}

// run executes one scenario against o.url.
func run(ctx context.Context, o options, progress io.Writer) (res result, err error) {
	r := &runner{
		o:        o,
		id:       o.id,
		progress: &lockedWriter{w: progress},
		perProd:  make([]atomic.Uint64, o.producers),
		notify:   make(chan struct{}, 1),
	}
	if r.admin, err = amqp091.Dial(o.url); err != nil {
		return res, fmt.Errorf("connect: %w", err)
	}
	defer r.admin.Close()
	if r.ach, err = r.admin.Channel(); err != nil {
		return res, fmt.Errorf("open channel: %w", err)
	}
	defer r.cleanup()
	defer func() {
		for _, f := range r.atEnd {
			f()
		}
	}()
	if o.brokerPID > 0 {
		if r.rss, err = startRSS(o.brokerPID); err != nil {
			return res, err
		}
		defer func() {
			if r.rss != nil {
				r.rss.stop()
			}
		}()
	}

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	stopProgress := r.reportProgress()
	defer stopProgress()

	res = result{
		Scenario: o.scenario, URL: redact(o.url), Size: o.size, Producers: o.producers, Consumers: o.consumers,
		Confirm: o.confirm, Persistent: o.persistent, Prefetch: o.prefetch, Ack: o.ack, QueueType: o.queueType,
		Rate: o.rate, Latency: "none", Client: o.client,
	}
	cpu0 := cpuTime()
	var elapsed time.Duration
	switch o.scenario {
	case "publish":
		elapsed, err = r.scenarioPublish(ctx, &res)
	case "backlog":
		elapsed, err = r.scenarioBacklog(ctx, &res)
	case "consume":
		elapsed, err = r.scenarioConsume(ctx, &res)
	case "drain":
		elapsed, err = r.scenarioDrain(ctx, &res)
	case "e2e":
		elapsed, err = r.scenarioE2E(ctx, &res)
	case "fanout":
		elapsed, err = r.scenarioFanout(ctx, &res)
	case "dlx-reject":
		elapsed, err = r.scenarioDLXReject(ctx, &res)
	case "ttl-expire":
		elapsed, err = r.scenarioTTL(ctx, &res)
	case "maxlen":
		elapsed, err = r.scenarioMaxLen(ctx, &res)
	case "queues":
		elapsed, err = r.scenarioQueues(ctx, &res)
	case "idle-conns":
		elapsed, err = r.scenarioIdleConns(ctx, &res)
	case "delayed":
		elapsed, err = r.scenarioDelayed(ctx, &res)
	case "retry":
		elapsed, err = r.scenarioRetry(ctx, &res)
	}
	if err != nil {
		return res, err
	}
	if r.rss != nil {
		res.BrokerRSSPeakMiB, res.BrokerRSSEndMiB, err = r.rss.stop()
		r.rss = nil
		if err != nil {
			return res, err
		}
	}
	res.ClientCPUS = (cpuTime() - cpu0).Seconds()
	res.Seconds = elapsed.Seconds()
	if res.Seconds > 0 {
		res.MsgsPerS = float64(res.Msgs) / res.Seconds
		res.MBPerS = res.MsgsPerS * float64(o.size) / 1e6
	}
	res.P50MS, res.P99MS, res.MaxMS = r.lat.summary()
	res.Nacked = r.nacked.Load()
	return res, nil
}

func (r *runner) cleanup() {
	if r.o.keep {
		return
	}
	for _, q := range r.queues {
		r.ach.QueueDelete(q, false, false, false)
	}
	for _, x := range r.exchanges {
		r.ach.ExchangeDelete(x, false, false)
	}
}

func (r *runner) reportProgress() (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start := time.Now()
		var lastSent, lastRecv uint64
		for {
			select {
			case <-quit:
				return
			case now := <-t.C:
				sent, recv := r.sent.Load(), r.received.Load()
				fmt.Fprintf(r.progress, "bench: %3.0fs  sent %d (%d/s)  confirmed %d  received %d (%d/s)  in flight %d\n",
					now.Sub(start).Seconds(), sent, sent-lastSent, r.published.Load(), recv, recv-lastRecv, int64(sent)-int64(recv))
				lastSent, lastRecv = sent, recv
			}
		}
	}()
	return func() { close(quit); wg.Wait() }
}

// declareQueue declares a queue of the run's type with extra arguments.
func (r *runner) declareQueue(name string, args amqp091.Table) error {
	if args == nil {
		args = amqp091.Table{}
	}
	if r.o.queueType == "quorum" {
		args["x-queue-type"] = "quorum"
	}
	if _, err := r.ach.QueueDeclare(name, r.o.durable, false, false, false, args); err != nil {
		return fmt.Errorf("declare queue %s: %w", name, err)
	}
	r.queues = append(r.queues, name)
	return nil
}

// finishTarget sets how many arrivals end the wait, once producers are
// done and the number is known.
func (r *runner) finishTarget(n uint64) {
	r.target.Store(n)
	r.wake()
}

func (r *runner) wake() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// arrived counts one new arrival.
func (r *runner) arrived() {
	if n := r.received.Add(1); n >= r.target.Load() {
		r.wake()
	}
}

// awaitArrivals waits until the arrivals reach the target or ctx ends (the
// verification then reports what is missing).
func (r *runner) awaitArrivals(ctx context.Context) {
	for r.received.Load() < r.target.Load() {
		select {
		case <-r.notify:
		case <-ctx.Done():
			return
		}
	}
}

// expected is the number of messages the broker accepted.
func (r *runner) expected() uint64 {
	return r.published.Load()
}

// verify fills lost and duplicated from the tracker.
func (r *runner) verify(res *result, want uint64) {
	got, dup := r.track.counts()
	if got < want {
		res.Lost = want - got
	}
	res.Duplicated = dup + r.strays.Load()
}

// produceAll runs o.producers publishers to exchange and returns when all
// have finished and every confirm has arrived. Producer p publishes its
// message i with routing key keys[(p+i) % len(keys)] (round-robin). The
// returned duration runs from the first publish to the last confirm.
func (r *runner) produceAll(ctx context.Context, exchange string, keys []string, stamp stampFunc) (time.Duration, error) {
	start := time.Now()
	var deadline time.Time
	if r.o.duration > 0 {
		deadline = start.Add(r.o.duration)
	}
	errc := make(chan error, r.o.producers)
	for p := 0; p < r.o.producers; p++ {
		count := -1
		if r.o.duration == 0 {
			count = r.o.n / r.o.producers
			if p < r.o.n%r.o.producers {
				count++
			}
		}
		go func() { errc <- r.produce(ctx, p, count, deadline, exchange, keys, stamp) }()
	}
	var first error
	for p := 0; p < r.o.producers; p++ {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return time.Since(start), first
}

// publisher is one publishing connection of either client.
type publisher interface {
	// publish sends (or buffers) one message with the routing key of
	// index key in the keys the publisher was dialled with, and the
	// properties x asks for.
	publish(key int, body []byte, x pubExtra) error
	// flush sends what is buffered (before the producer pauses).
	flush() error
	// confirm returns the next confirm, in publish order.
	confirm() (ack bool, err error)
	// close closes the channel (a barrier: the broker has handled every
	// publish when it answers close-ok) and the connection.
	close() error
}

// dialPublisher connects a publisher to exchange with the given routing
// keys with the run's client.
func (r *runner) dialPublisher(ctx context.Context, exchange string, keys []string) (publisher, error) {
	if r.o.client == "raw" {
		c, err := rawDial(r.o.url, rawConfig{})
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		p, err := newRawPublisher(c, exchange, keys, r.o.persistent, r.o.confirm > 0)
		if err != nil {
			c.nc.Close()
			return nil, err
		}
		return p, nil
	}
	conn, err := amqp091.Dial(r.o.url)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("open channel: %w", err)
	}
	p := &goPublisher{ctx: ctx, conn: conn, ch: ch, exchange: exchange, keys: keys, mode: amqp091.Transient}
	if r.o.persistent {
		p.mode = amqp091.Persistent
	}
	if r.o.confirm > 0 {
		if err := ch.Confirm(false); err != nil {
			conn.Close()
			return nil, fmt.Errorf("confirm.select: %w", err)
		}
		p.confirms = ch.NotifyPublish(make(chan amqp091.Confirmation, r.o.confirm+1))
	}
	return p, nil
}

// goPublisher publishes with amqp091-go.
type goPublisher struct {
	ctx      context.Context
	conn     *amqp091.Connection
	ch       *amqp091.Channel
	confirms chan amqp091.Confirmation
	exchange string
	keys     []string
	mode     uint8
}

func (p *goPublisher) publish(key int, body []byte, x pubExtra) error {
	var h amqp091.Table
	if x.header != "" {
		h = amqp091.Table{x.header: x.headerValue}
	}
	return p.ch.PublishWithContext(p.ctx, p.exchange, p.keys[key], false, false, amqp091.Publishing{
		Body: body, DeliveryMode: p.mode, Expiration: x.expiration, Headers: h,
	})
}

func (p *goPublisher) flush() error { return nil }

func (p *goPublisher) confirm() (bool, error) {
	c, ok := <-p.confirms
	if !ok {
		return false, errors.New("channel closed while awaiting confirms")
	}
	return c.Ack, nil
}

func (p *goPublisher) close() error {
	defer p.conn.Close()
	return p.ch.Close()
}

// pubExtra is what a scenario sets on one message besides its body.
type pubExtra struct {
	// ttlMS goes in the body's ttl field: ttl-expire's TTL, delayed's
	// delay.
	ttlMS      uint32
	expiration string // the expiration property; "" = none
	// header, if set, is one integer header (delayed: x-delay or
	// x-delivery-time) with value headerValue.
	header      string
	headerValue int64
}

// stampFunc returns the extras of producer's next message, sent at sent.
// Each producer calls it from its own goroutine.
type stampFunc func(producer int, sent time.Time) pubExtra

func (r *runner) produce(ctx context.Context, id, count int, deadline time.Time, exchange string, keys []string, stamp stampFunc) error {
	p, err := r.dialPublisher(ctx, exchange, keys)
	if err != nil {
		return fmt.Errorf("producer %d: %w", id, err)
	}
	closed := false
	defer func() {
		if !closed {
			p.close()
		}
	}()
	var sentAt []time.Time // send times of unconfirmed publishes, in order
	await := func() error {
		ack, err := p.confirm()
		if err != nil {
			return fmt.Errorf("producer %d: %w", id, err)
		}
		if r.confirmLatency {
			r.lat.add(float64(time.Since(sentAt[0])) / 1e6)
		}
		sentAt = sentAt[1:]
		if ack {
			r.published.Add(1)
		} else {
			r.nacked.Add(1)
		}
		return nil
	}
	perProducerRate := r.o.rate / float64(r.o.producers)
	start := time.Now()
	buf := make([]byte, r.o.size)
	i := 0
	for ; count < 0 || i < count; i++ {
		if !deadline.IsZero() && time.Now().After(deadline) {
			break
		}
		if ctx.Err() != nil {
			break
		}
		if perProducerRate > 0 {
			// Sleep only when a millisecond or more ahead: a sleep per
			// message (20 µs at 50k/s) cost the client more CPU than the
			// broker's work, and took it from the broker.
			due := start.Add(time.Duration(float64(i) / perProducerRate * 1e9))
			if d := time.Until(due); d >= time.Millisecond {
				if err := p.flush(); err != nil {
					return fmt.Errorf("producer %d: publish: %w", id, err)
				}
				// Ahead of the rate: read the confirms due meanwhile,
				// so a confirm's latency is its own, not the wait for
				// the window to fill (at 5k/s a window of 1,000 is
				// read 200 ms late).
				for len(sentAt) > 0 && time.Until(due) > 0 {
					if err := await(); err != nil {
						return err
					}
				}
				time.Sleep(time.Until(due))
			}
		}
		now := time.Now()
		var x pubExtra
		if stamp != nil {
			x = stamp(id, now)
		}
		body := makeBody(buf, r.o.size, id, uint64(i), now, x.ttlMS)
		if err := p.publish((id+i)%len(keys), body, x); err != nil {
			return fmt.Errorf("producer %d: publish: %w", id, err)
		}
		r.sent.Add(1)
		if r.o.confirm == 0 {
			r.published.Add(1)
			continue
		}
		sentAt = append(sentAt, now)
		for len(sentAt) >= r.o.confirm {
			if err := await(); err != nil {
				return err
			}
		}
	}
	for len(sentAt) > 0 {
		if err := await(); err != nil {
			return err
		}
	}
	r.perProd[id].Store(uint64(i))
	closed = true
	return p.close()
}

// consumeAction says what a consumer does with each delivery.
type consumeAction int

const (
	actAck consumeAction = iota
	actReject
)

// consumerSpec says what a consumer does.
type consumerSpec struct {
	// queues are consumed on one connection: with amqp091 a channel
	// each, with raw as many channels as the broker allows, the
	// consumers spread over them.
	queues []string
	action consumeAction
	record bool // track arrivals (and their latency)
	// latency, if set, gives a delivery's latency in ms.
	latency func(bodyInfo, time.Time) float64
	// slot is added to the producer number when tracking, so the copies
	// of one message in several queues (fanout) are tracked apart.
	slot int
}

// subscriber is one consuming connection of either client.
type subscriber interface {
	// next returns the next delivery's tag and body (valid until the
	// next call); it fails once close was called.
	next() (tag uint64, body []byte, err error)
	ack(tag uint64)
	reject(tag uint64)
	// close ends the connection; a next under way returns.
	close()
}

// dialSubscribers connects one connection consuming queues with the
// run's client; each subscriber returned is read by its own goroutine (the
// raw client: one for the connection; amqp091: one per channel).
func (r *runner) dialSubscribers(queues []string, noAck bool) ([]subscriber, error) {
	if r.o.client == "raw" {
		c, err := rawDial(r.o.url, rawConfig{channelMax: uint16(min(len(queues), 65535))})
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		s, err := newRawSubscriber(c, queues, r.o.prefetch, noAck)
		if err != nil {
			c.nc.Close()
			return nil, err
		}
		return []subscriber{s}, nil
	}
	conn, err := amqp091.Dial(r.o.url)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	subs := make([]subscriber, 0, len(queues))
	for _, queue := range queues {
		ch, err := conn.Channel()
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("open channel: %w", err)
		}
		if !noAck {
			if err := ch.Qos(r.o.prefetch, 0, false); err != nil {
				conn.Close()
				return nil, fmt.Errorf("qos: %w", err)
			}
		}
		deliveries, err := ch.Consume(queue, "", noAck, false, false, false, nil)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("consume %s: %w", queue, err)
		}
		subs = append(subs, &goSubscriber{conn: conn, ch: ch, deliveries: deliveries})
	}
	return subs, nil
}

// goSubscriber consumes with amqp091-go.
type goSubscriber struct {
	conn       *amqp091.Connection
	ch         *amqp091.Channel
	deliveries <-chan amqp091.Delivery
}

func (s *goSubscriber) next() (uint64, []byte, error) {
	d, ok := <-s.deliveries
	if !ok {
		return 0, nil, errors.New("consumer closed")
	}
	return d.DeliveryTag, d.Body, nil
}

func (s *goSubscriber) ack(tag uint64)    { s.ch.Ack(tag, false) }
func (s *goSubscriber) reject(tag uint64) { s.ch.Reject(tag, false) }
func (s *goSubscriber) close()            { s.conn.Close() } // the connection's other channels too: all stop together

// consumer runs one consuming connection until stop is closed.
func (r *runner) consumer(spec consumerSpec, stop <-chan struct{}, ready chan<- error) {
	auto := r.o.ack == "auto" && spec.action == actAck
	subs, err := r.dialSubscribers(spec.queues, auto)
	if err != nil {
		ready <- fmt.Errorf("consumer: %w", err)
		return
	}
	ready <- nil
	var wg sync.WaitGroup
	for _, s := range subs[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.consume(s, spec, auto, stop)
		}()
	}
	r.consume(subs[0], spec, auto, stop)
	wg.Wait()
}

// consume reads s until stop is closed (or s fails), acknowledging and
// recording each delivery as spec says.
func (r *runner) consume(s subscriber, spec consumerSpec, auto bool, stop <-chan struct{}) {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-stop:
		case <-done:
		}
		s.close()
	}()
	for {
		tag, body, err := s.next()
		if err != nil {
			return
		}
		now := time.Now()
		if !auto {
			if spec.action == actReject {
				s.reject(tag)
			} else {
				s.ack(tag)
			}
		}
		if !spec.record {
			continue
		}
		info, err := parseBody(body)
		if err != nil {
			r.strays.Add(1)
			continue
		}
		if r.track.record(spec.slot+info.producer, info.seq) {
			if spec.latency != nil {
				r.lat.add(spec.latency(info, now))
			}
			r.arrived()
		}
	}
}

// startConsumers starts n consumers and waits until each has its
// consume-ok.
func (r *runner) startConsumers(n int, s consumerSpec, stop <-chan struct{}, wg *sync.WaitGroup) error {
	ready := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.consumer(s, stop, ready)
		}()
	}
	var first error
	for i := 0; i < n; i++ {
		if err := <-ready; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func sinceSent(info bodyInfo, now time.Time) float64 { return float64(now.Sub(info.sent)) / 1e6 }

// queueDepth returns the ready count of a queue.
func (r *runner) queueDepth(name string) (int, error) {
	q, err := r.ach.QueueDeclarePassive(name, r.o.durable, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("inspect queue %s: %w", name, err)
	}
	return q.Messages, nil
}

// cpuTime returns the CPU time (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// lockedWriter serializes writes to w, which goroutines share.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
