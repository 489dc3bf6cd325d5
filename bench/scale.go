package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/brokerd/brokerd/amqp"
)

// The scale scenarios: many queues, many (idle) connections. Each verifies
// its messages as the others do; with -broker-pid the result carries the
// broker's RSS (see rss.go).

// scenarioQueues: -queues durable queues, one consumer each, the consumers
// spread over -consumers connections (channels as needed); the producers
// publish round-robin across the queues through the default exchange.
// Rate = messages from the first publish to the last arrival, so a run
// with -queues 1 and one with -queues 1000 compare directly.
func (r *runner) scenarioQueues(ctx context.Context, res *result) (time.Duration, error) {
	names := make([]string, r.o.queues)
	for i := range names {
		names[i] = r.id + "q" + strconv.Itoa(i)
		if err := r.declareQueue(names[i], nil); err != nil {
			return 0, err
		}
	}
	r.track = newTracker(r.o.producers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	conns := min(r.o.consumers, len(names))
	ready := make(chan error, conns)
	for c := 0; c < conns; c++ {
		var qs []string
		for i := c; i < len(names); i += conns {
			qs = append(qs, names[i])
		}
		spec := consumerSpec{queues: qs, action: actAck, record: true, latency: sinceSent}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.consumer(spec, stop, ready)
		}()
	}
	var first error
	for c := 0; c < conns; c++ {
		if err := <-ready; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return 0, first
	}
	start := time.Now()
	if _, err := r.produceAll(ctx, "", names, nil); err != nil {
		return 0, err
	}
	r.finishTarget(r.expected())
	r.awaitArrivals(ctx)
	elapsed := time.Since(start)
	res.Msgs = r.received.Load()
	res.Queues = len(names)
	res.Latency = "publish to delivery"
	r.verify(res, r.expected())
	return elapsed, nil
}

// idleDialsInFlight bounds the idle connections being opened at once: a
// burst of thousands of connects overflows the broker's accept queue
// (SYNs dropped, connects retried after a second or more).
const idleDialsInFlight = 500

// scenarioIdleConns: open -conns raw connections with heartbeats of
// -heartbeat seconds (the client sends its own every half interval), hold
// them while one producer/consumer pair runs a verified e2e at -rate for
// -duration, then count the idle connections still open: any the broker
// dropped fails the run. Rate and latency are the pair's.
func (r *runner) scenarioIdleConns(ctx context.Context, res *result) (time.Duration, error) {
	if err := raiseNoFile(r.o.conns); err != nil {
		return 0, err
	}
	fmt.Fprintf(r.progress, "bench: opening %d idle connections (heartbeat %d s, %d at a time)\n", r.o.conns, r.o.heartbeat, idleDialsInFlight)
	start := time.Now()
	pool, err := openIdle(ctx, r.o.url, r.o.conns, uint16(r.o.heartbeat))
	if err != nil {
		return 0, err
	}
	r.atEnd = append(r.atEnd, pool.close)
	res.ConnsOpenS = time.Since(start).Seconds()
	fmt.Fprintf(r.progress, "bench: %d idle connections open in %.1f s; e2e at %.0f msgs/s for %s\n", r.o.conns, res.ConnsOpenS, r.o.rate, r.o.duration)
	elapsed, err := r.scenarioE2E(ctx, res)
	if err != nil {
		return 0, err
	}
	res.Conns = r.o.conns
	dropped, why := pool.dropped()
	res.ConnsDropped = dropped
	if dropped > 0 {
		fmt.Fprintf(r.progress, "bench: the broker dropped %d idle connections; the first: %v\n", dropped, why)
	}
	return elapsed, nil
}

// raiseNoFile raises this process's soft RLIMIT_NOFILE to its hard limit
// and fails if conns connections (and a margin for the run's others and
// the process's own files) would not fit.
func raiseNoFile(conns int) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return fmt.Errorf("get RLIMIT_NOFILE: %w", err)
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", rl.Max, err)
		}
	}
	const margin = 64
	if need := uint64(conns) + margin; need > rl.Cur {
		return fmt.Errorf("-conns %d needs %d file descriptors, more than the hard limit RLIMIT_NOFILE %d of this process (raise it: ulimit -Hn as root, or LimitNOFILE)", conns, need, rl.Cur)
	}
	return nil
}

// idlePool is the idle connections of one idle-conns run, with the one
// goroutine that sends their heartbeats. Safe for concurrent use.
type idlePool struct {
	conns []*idleConn
	quit  chan struct{} // closed to stop the heartbeat sender
	done  chan struct{} // closed when it has stopped
}

// openIdle opens n idle connections, at most idleDialsInFlight at a time,
// and starts their heartbeats. On failure it closes those it opened.
func openIdle(ctx context.Context, url string, n int, heartbeat uint16) (*idlePool, error) {
	p := &idlePool{conns: make([]*idleConn, n), quit: make(chan struct{}), done: make(chan struct{})}
	sem := make(chan struct{}, idleDialsInFlight)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	failed := func() bool { mu.Lock(); defer mu.Unlock(); return first != nil }
	for i := 0; i < n && !failed() && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := dialIdle(url, heartbeat)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("open idle connection %d of %d: %w", i+1, n, err)
				}
				return
			}
			p.conns[i] = c
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = fmt.Errorf("open idle connections: %w", ctx.Err())
	}
	go p.beat(heartbeat)
	if first != nil {
		p.close()
		return nil, first
	}
	return p, nil
}

// beat sends a heartbeat on every connection each half interval until
// quit: the connections send nothing else, and the broker drops a client
// it has not heard for two intervals.
func (p *idlePool) beat(heartbeat uint16) {
	defer close(p.done)
	if heartbeat == 0 {
		<-p.quit
		return
	}
	t := time.NewTicker(time.Duration(heartbeat) * time.Second / 2)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-t.C:
			for _, c := range p.conns {
				if c != nil {
					c.heartbeat()
				}
			}
		}
	}
}

// dropped counts the connections whose reader has ended (the broker
// closed them, or they failed) and returns the first one's reason.
func (p *idlePool) dropped() (int, error) {
	n := 0
	var why error
	for _, c := range p.conns {
		if c == nil {
			continue
		}
		select {
		case <-c.done:
			if n == 0 {
				why = c.err
			}
			n++
		default:
		}
	}
	return n, why
}

// close stops the heartbeats and closes every connection politely
// (connection.close, then close-ok), all at once: closing costs the broker
// little, unlike accepting.
func (p *idlePool) close() {
	close(p.quit)
	<-p.done
	for _, c := range p.conns {
		if c != nil {
			c.startClose()
		}
	}
	for _, c := range p.conns {
		if c != nil {
			<-c.done
			c.c.nc.Close()
		}
	}
}

// idleConn is one idle connection. Its reader goroutine reads what the
// broker sends (heartbeats) until the connection ends; writes (the
// pool's heartbeats, the close) are serialised by wmu.
type idleConn struct {
	c       *rawConn
	r       *bufio.Reader // replaces c.fr (32 KiB) after the handshake
	wmu     sync.Mutex
	closing bool          // guarded by wmu: connection.close was sent
	done    chan struct{} // closed when the reader has returned
	err     error         // why the reader returned; read after done
}

var heartbeatFrame = []byte{amqp.FrameHeartbeat, 0, 0, 0, 0, 0, 0, amqp.FrameEnd} // channel 0, size 0

// dialIdle opens one idle connection (channel 1 open, like a client
// between bursts) and starts its reader.
func dialIdle(url string, heartbeat uint16) (*idleConn, error) {
	// A small write buffer: 10,000 of the load generator's 256 KiB
	// would take gigabytes.
	c, err := rawDial(url, rawConfig{heartbeat: heartbeat, writeBuffer: 512})
	if err != nil {
		return nil, err
	}
	ic := &idleConn{c: c, done: make(chan struct{})}
	if c.fr.Buffered() == 0 {
		// A small read buffer too: idle connections read 8-byte frames.
		ic.r, c.fr = bufio.NewReaderSize(c.nc, 64), nil
	}
	go ic.read()
	return ic, nil
}

// read reads frames until the connection ends: heartbeats are skipped; a
// close-ok after our close ends it cleanly; anything else ends it with an
// error (a connection.close from the broker, say).
func (ic *idleConn) read() {
	defer close(ic.done)
	for {
		m, err := ic.method()
		ic.wmu.Lock()
		closing := ic.closing
		ic.wmu.Unlock()
		switch {
		case err != nil && closing:
			ic.err = fmt.Errorf("closing: %w", err)
			return
		case err != nil:
			ic.err = err
			return
		}
		if _, ok := m.(*amqp.ConnectionCloseOk); ok && closing {
			return
		}
		ic.err = fmt.Errorf("unexpected %s on an idle connection", m.Name())
		return
	}
}

// method returns the next method frame on channel 0, skipping
// heartbeats; a connection.close from the broker is returned as an error.
func (ic *idleConn) method() (amqp.Method, error) {
	if ic.r == nil {
		return ic.c.method(0)
	}
	var h [7]byte // type, channel, payload size
	for {
		if _, err := io.ReadFull(ic.r, h[:]); err != nil {
			return nil, err
		}
		size := binary.BigEndian.Uint32(h[3:])
		if size > ic.c.frameMax {
			return nil, fmt.Errorf("frame of %d bytes, over frame_max %d", size, ic.c.frameMax)
		}
		payload := make([]byte, size+1) // and the frame-end octet
		if _, err := io.ReadFull(ic.r, payload); err != nil {
			return nil, err
		}
		if payload[size] != amqp.FrameEnd {
			return nil, errors.New("bad frame-end octet")
		}
		switch {
		case h[0] == amqp.FrameHeartbeat:
			continue
		case h[0] != amqp.FrameMethod || binary.BigEndian.Uint16(h[1:]) != 0:
			return nil, fmt.Errorf("frame type %d on channel %d on an idle connection", h[0], binary.BigEndian.Uint16(h[1:]))
		}
		m, err := amqp.DecodeMethod(payload[:size])
		if err != nil {
			return nil, err
		}
		return m, closeError(m)
	}
}

// heartbeat sends one heartbeat frame (nothing once closing).
func (ic *idleConn) heartbeat() {
	ic.wmu.Lock()
	defer ic.wmu.Unlock()
	if ic.closing {
		return
	}
	ic.c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := ic.c.nc.Write(heartbeatFrame); err != nil {
		ic.c.nc.Close() // the reader sees it and records why
	}
}

// startClose sends connection.close; the reader returns on close-ok, or
// after 10 s.
func (ic *idleConn) startClose() {
	ic.wmu.Lock()
	defer ic.wmu.Unlock()
	ic.closing = true
	ic.c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	ic.c.send(0, &amqp.ConnectionClose{ReplyCode: 200, ReplyText: "bye"})
	if err := ic.c.w.Flush(); err != nil && !errors.Is(err, syscall.EPIPE) {
		ic.c.nc.Close()
	}
}
