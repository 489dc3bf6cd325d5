package amqp

import (
	"sync"
	"sync/atomic"
)

// Unfinished content, over the whole server. Each connection's bodies in
// assembly are bounded by MaxUnfinishedContent, as their frames arrive;
// MaxUnfinishedContentTotal bounds them over every connection, so that
// many connections sending large bodies at once cannot hold more between
// them than the broker means to give (8 connections held 1.9 GiB of half
// received bodies past a 1 GiB memory watermark before the bound).
//
// A body reserves its declared size (at most the whole budget) when its
// content header arrives, before any of its body frames is read, and gives
// it back when it is complete or dropped. Reserving the whole size up
// front is what keeps the bound free of deadlock: a body that has its
// reservation can always be finished, so bodies never wait on each other
// half-way. The rules:
//
//   - A connection that holds no reservation waits, not reading its
//     socket, until the budget has room (first come, first served); the
//     connection.blocked notification is not sent for it (this is flow
//     control, like RabbitMQ's credit flow, not a resource alarm), and
//     its heartbeat monitor starts again when the wait ends.
//   - A body larger than the whole budget takes the whole budget: it is
//     received alone, once every other body has finished.
//   - A connection that already holds a reservation (it interleaves bodies
//     on several channels) never waits for another: its other bodies'
//     frames lie behind the one it would wait for, so waiting could
//     deadlock it with itself or with another such connection. It takes
//     the reservation beyond the budget instead; the budget then admits
//     nobody new until it is back under. What such a connection holds is
//     still bounded by MaxUnfinishedContent, and by the memory alarm,
//     which stops it at its next content frame.
type contentBudget struct {
	mu      sync.Mutex
	limit   uint64 // SetMaxUnfinishedContentTotal changes it
	used    uint64
	waiters []*budgetWait // first come first served

	// peak is the highest used ever seen, for tests.
	peak atomic.Uint64
	// received counts the body bytes read from clients, for tests and
	// figures: what the server took in, held or handed to the broker.
	received atomic.Uint64
}

type budgetWait struct {
	size    uint64        // the body's
	n       uint64        // what it reserves: size clamped to the limit
	granted chan struct{} // closed when the reservation is made
}

func newContentBudget(limit uint64) *contentBudget {
	return &contentBudget{limit: limit}
}

// clampLocked is what a body of size n reserves. Caller holds b.mu.
func (b *contentBudget) clampLocked(n uint64) uint64 { return min(n, b.limit) }

// takeLocked reserves n. Caller holds b.mu.
func (b *contentBudget) takeLocked(n uint64) {
	b.used += n
	if b.used > b.peak.Load() {
		b.peak.Store(b.used)
	}
}

// tryAcquire reserves size (clamped to the budget) if it fits and nobody
// waits ahead, or with force whether it fits or not (the caller holds a
// reservation already); it returns what it reserved, to be released, or 0.
func (b *contentBudget) tryAcquire(size uint64, force bool) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.clampLocked(size)
	if !force && (len(b.waiters) > 0 || b.used+n > b.limit) {
		return 0
	}
	b.takeLocked(n)
	return n
}

// wait reserves size (clamped) once the budget has room for it and every
// earlier waiter has had its turn, or gives up when cancel is closed; it
// returns what it reserved, to be released, or 0.
func (b *contentBudget) wait(size uint64, cancel <-chan struct{}) uint64 {
	return b.await(b.enqueue(size), cancel)
}

// enqueue takes its place in line for size (clamped): wait's first half.
func (b *contentBudget) enqueue(size uint64) *budgetWait {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := &budgetWait{size: size, n: b.clampLocked(size), granted: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.grantLocked() // room may have come since tryAcquire
	return w
}

// await is wait's second half, for w from enqueue.
func (b *contentBudget) await(w *budgetWait, cancel <-chan struct{}) uint64 {
	select {
	case <-w.granted:
		return w.n // set before granted was closed
	case <-cancel:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.granted: // granted meanwhile: give it back
		b.used -= w.n
	default:
		for i, o := range b.waiters {
			if o == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
	}
	b.grantLocked() // w may have held up those behind it
	return 0
}

// release gives back n, as acquired, and lets waiters in.
func (b *contentBudget) release(n uint64) {
	b.mu.Lock()
	b.used -= n
	b.grantLocked()
	b.mu.Unlock()
}

// setLimit changes the budget (at least 1 byte). Reservations made stay;
// waiters are let in as the new limit allows.
func (b *contentBudget) setLimit(n uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.limit = max(n, 1)
	for _, w := range b.waiters {
		w.n = b.clampLocked(w.size)
	}
	b.grantLocked()
}

// grantLocked grants the waiters at the front that fit, in order.
func (b *contentBudget) grantLocked() {
	for len(b.waiters) > 0 {
		w := b.waiters[0]
		if b.used+w.n > b.limit {
			return
		}
		b.waiters[0] = nil
		b.waiters = b.waiters[1:]
		b.takeLocked(w.n)
		close(w.granted)
	}
}

// ContentStats are figures of the content the server receives.
type ContentStats struct {
	// Received counts the body bytes read from clients since the server
	// started.
	Received uint64
	// Reserved is the unfinished-content budget reserved now by bodies
	// being received; Peak the most it ever was; Limit the budget
	// (ServerConfig.MaxUnfinishedContentTotal).
	Reserved, Peak, Limit uint64
}

// ContentStats returns the server's content figures. Safe for concurrent
// use.
func (s *Server) ContentStats() ContentStats {
	b := s.budget
	b.mu.Lock()
	used, limit := b.used, b.limit
	b.mu.Unlock()
	return ContentStats{Received: b.received.Load(), Reserved: used, Peak: b.peak.Load(), Limit: limit}
}

// SetMaxUnfinishedContentTotal changes ServerConfig.MaxUnfinishedContentTotal
// while the server runs (brokerd derives it from the memory watermark,
// which a reload may change). Bodies that reserved more keep it until they
// complete. Safe for concurrent use.
func (s *Server) SetMaxUnfinishedContentTotal(n uint64) { s.budget.setLimit(n) }

// reserveBody reserves the budget for ch's body of size bytes, after its
// content header: waiting for room if the connection holds no other
// reservation (see contentBudget). It reports false if the connection
// started closing first. Reader goroutine.
func (c *ServerConn) reserveBody(ch *serverChannel, size uint64) bool {
	b := c.srv.budget
	n := b.tryAcquire(size, c.reserved > 0)
	if n == 0 {
		n = b.wait(size, c.closingCh)
		// Not read from while it waited, it could not be heard: the
		// heartbeat monitor starts again from now, as after Unblocked.
		c.armReadDeadline()
		if n == 0 {
			return false
		}
	}
	ch.reserved = n
	c.reserved += n
	return true
}

// releaseBody gives back ch's reservation, if it has one.
func (c *ServerConn) releaseBody(ch *serverChannel) {
	if ch.reserved == 0 {
		return
	}
	c.srv.budget.release(ch.reserved)
	c.reserved -= ch.reserved
	ch.reserved = 0
}
