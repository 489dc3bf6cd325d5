package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// pubConfig is what one publishing run is told.
type pubConfig struct {
	url    string
	queues []string
	size   int
	via    string  // the x-migrate-via header: the broker behind url
	window int     // unconfirmed publishes at most, per queue
	rate   float64 // msgs/s over all queues; 0 = as fast as confirms allow
	count  uint64  // messages per queue; 0 = until stopped
	// drain bounds the wait for the confirms still out once the run is
	// stopped; the rest count as unconfirmed.
	drain time.Duration
	log   io.Writer // every publisher writes to it: safe for concurrent use
	// declare declares the queues (durable) before publishing: fill does,
	// produce does not (the queues are the ones being migrated).
	declare bool
}

// counters are a run's totals, read by the progress reporter.
type counters struct {
	sent, confirmed, nacked, reconnects atomic.Uint64
}

// publishAll runs one publisher per queue for producer p, continuing each
// stream of l, until each has published cfg.count messages and had them
// confirmed, or stop closes (then it waits up to cfg.drain for the
// confirms out). It returns once every publisher has ended; l has their
// records. A publisher whose connection fails reconnects every 250 ms,
// counting what was in flight as unconfirmed, until stop.
func publishAll(ctx context.Context, cfg pubConfig, l *ledger, p int, stop <-chan struct{}, c *counters) error {
	var wg sync.WaitGroup
	errs := make([]error, len(cfg.queues))
	for q := range cfg.queues {
		s := l.stream(p, q)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[q] = publishStream(ctx, cfg, s, p, q, stop, c)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// publisher is one connection and confirm-mode channel to one queue.
type publisher struct {
	conn     *amqp091.Connection
	ch       *amqp091.Channel
	confirms chan amqp091.Confirmation
	pending  []uint64 // seqs published and not yet confirmed, in publish order
}

func dialPublisher(cfg pubConfig, queue string) (*publisher, error) {
	conn, err := amqp091.Dial(cfg.url)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil && cfg.declare {
		_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
	}
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("open channel on %s: %w", queue, err)
	}
	return &publisher{conn: conn, ch: ch, confirms: ch.NotifyPublish(make(chan amqp091.Confirmation, cfg.window+1))}, nil
}

// publishStream is one queue's publisher (see publishAll).
func publishStream(ctx context.Context, cfg pubConfig, s *stream, p, q int, stop <-chan struct{}, c *counters) error {
	queue := cfg.queues[q]
	run := runAt{Via: cfg.via, From: s.Next, Start: time.Now()}
	defer func() {
		run.To, run.End = s.Next, time.Now()
		s.Runs = append(s.Runs, run)
	}()
	perQueue := cfg.rate / float64(len(cfg.queues))
	var pub *publisher
	lost := func(why error) { // the connection is gone: what was in flight is unconfirmed
		s.Unconfirmed += uint64(len(pub.pending))
		fmt.Fprintf(cfg.log, "migrate: %s %s: %v; %d in flight unconfirmed, reconnecting\n", producerNames[p], queue, why, len(pub.pending))
		pub.conn.Close()
		pub = nil
	}
	confirm := func(cf amqp091.Confirmation) {
		seq := pub.pending[0]
		pub.pending = pub.pending[1:]
		if cf.Ack {
			s.Confirmed.add(seq)
			c.confirmed.Add(1)
		} else {
			s.Nacked++
			c.nacked.Add(1)
		}
	}
	defer func() {
		if pub != nil {
			s.Unconfirmed += uint64(len(pub.pending))
			pub.conn.Close()
		}
	}()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var buf []byte
	start, paced := time.Now(), 0.0 // paced: messages published since start, for the rate
	stopping := false
	var down time.Time // when the first failed dial of an outage failed
	var drainEnd <-chan time.Time
	published := uint64(0)
	for {
		if !stopping {
			select {
			case <-stop:
				stopping = true
				drainEnd = time.After(cfg.drain)
			case <-ctx.Done():
				return ctx.Err()
			default:
			}
		}
		done := cfg.count > 0 && published >= cfg.count
		if pub == nil {
			if stopping || done {
				return nil
			}
			var err error
			if pub, err = dialPublisher(cfg, queue); err != nil {
				if cfg.count > 0 && published == 0 && run.Reconnects == 0 {
					return fmt.Errorf("%s %s: %w", producerNames[p], queue, err) // fill: fail fast
				}
				if down.IsZero() {
					down = time.Now()
					fmt.Fprintf(cfg.log, "migrate: %s %s: %v (retrying every 250 ms)\n", producerNames[p], queue, err)
				}
				select {
				case <-time.After(250 * time.Millisecond):
				case <-stop:
				case <-ctx.Done():
					return ctx.Err()
				}
				continue
			}
			if s.Next > run.From || published > 0 {
				run.Reconnects++
				c.reconnects.Add(1)
				if !down.IsZero() {
					fmt.Fprintf(cfg.log, "migrate: %s %s: reconnected after %.1f s\n", producerNames[p], queue, time.Since(down).Seconds())
				}
			}
			down = time.Time{}
			// The pace starts again: a producer that was down does not
			// burst to catch up, the load stays at the rate.
			start, paced = time.Now(), 0
		}
		if (stopping || done) && len(pub.pending) == 0 {
			return nil
		}
		// Publish what is due, within the window.
		due := cfg.window
		if perQueue > 0 {
			due = int(perQueue*time.Since(start).Seconds() - paced)
		}
		if cfg.count > 0 {
			due = min(due, int(cfg.count-published))
		}
		var err error
		for ; !stopping && due > 0 && len(pub.pending) < cfg.window; due-- {
			seq := s.Next
			msg := newMessage(buf, cfg.size, q, p, seq, cfg.via, time.Now())
			buf = msg.Body
			s.Next++ // used, whatever happens: a number is never published twice
			if err = pub.ch.PublishWithContext(ctx, "", queue, false, false, msg); err != nil {
				break
			}
			pub.pending = append(pub.pending, seq)
			published++
			paced++
			c.sent.Add(1)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			lost(err)
			continue
		}
		// Wait for a confirm, or for the pacer's next tick.
		var wait <-chan time.Time
		if perQueue > 0 || len(pub.pending) == 0 {
			wait = tick.C
		}
		select {
		case cf, ok := <-pub.confirms:
			if !ok {
				lost(errors.New("channel closed"))
				continue
			}
			confirm(cf)
			for more := true; more; { // take every confirm already there
				select {
				case cf, ok := <-pub.confirms:
					if !ok {
						more = false
						break
					}
					confirm(cf)
				default:
					more = false
				}
			}
		case <-wait:
		case <-drainEnd:
			return nil // the deferred close counts the rest as unconfirmed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
