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
//
// The common case — room in the budget, nobody waiting — takes and gives
// back a reservation with one atomic operation each, without the mutex:
// every publish of every connection passes here.
type contentBudget struct {
	used  atomic.Uint64 // reserved now
	limit atomic.Uint64 // SetMaxUnfinishedContentTotal changes it (under mu)
	// nwait is len(waiters), for the lock-free paths: a reservation that
	// finds nobody waiting takes the room without the mutex, and a
	// release that finds nobody waiting lets nobody in.
	nwait atomic.Int64

	mu      sync.Mutex
	waiters []*budgetWait // first come first served

	// peak is the highest used ever seen, for tests.
	peak atomic.Uint64
	// received counts the body bytes read by connections that have
	// ended; each open one counts its own (ServerConn.received), so the
	// readers of many connections share no counter.
	received atomic.Uint64
}

type budgetWait struct {
	size    uint64        // the body's
	n       uint64        // what it reserves: size clamped to the limit
	granted chan struct{} // closed when the reservation is made
}

func newContentBudget(limit uint64) *contentBudget {
	b := &contentBudget{}
	b.limit.Store(max(limit, 1))
	return b
}

// clamp is what a body of size n reserves.
func (b *contentBudget) clamp(n uint64) uint64 { return min(n, b.limit.Load()) }

// take reserves n if used stays within the limit (or whatever used is,
// with force), and reports whether it did.
func (b *contentBudget) take(n uint64, force bool) bool {
	for {
		u := b.used.Load()
		if !force && u+n > b.limit.Load() {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			for p := b.peak.Load(); u+n > p && !b.peak.CompareAndSwap(p, u+n); p = b.peak.Load() {
			}
			return true
		}
	}
}

// tryAcquire reserves size (clamped to the budget) if it fits and nobody
// waits ahead, or with force whether it fits or not (the caller holds a
// reservation already); it returns what it reserved, to be released, or 0.
func (b *contentBudget) tryAcquire(size uint64, force bool) uint64 {
	n := b.clamp(size)
	if b.nwait.Load() == 0 || force {
		if b.take(n, force) {
			return n
		}
		return 0
	}
	return 0 // others wait ahead
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
	w := &budgetWait{size: size, n: b.clamp(size), granted: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	// Counted before the room is looked at: a release that comes after
	// that look sees the waiter and grants it (release).
	b.nwait.Store(int64(len(b.waiters)))
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
	select {
	case <-w.granted: // granted meanwhile: give it back
		b.mu.Unlock()
		b.release(w.n)
		return 0
	default:
		for i, o := range b.waiters {
			if o == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
		b.nwait.Store(int64(len(b.waiters)))
	}
	b.grantLocked() // w may have held up those behind it
	b.mu.Unlock()
	return 0
}

// release gives back n, as acquired, and lets waiters in.
func (b *contentBudget) release(n uint64) {
	b.used.Add(-n)
	if b.nwait.Load() > 0 {
		b.mu.Lock()
		b.grantLocked()
		b.mu.Unlock()
	}
}

// setLimit changes the budget (at least 1 byte). Reservations made stay;
// waiters are let in as the new limit allows.
func (b *contentBudget) setLimit(n uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.limit.Store(max(n, 1))
	for _, w := range b.waiters {
		w.n = b.clamp(w.size)
	}
	b.grantLocked()
}

// grantLocked grants the waiters at the front that fit, in order.
func (b *contentBudget) grantLocked() {
	for len(b.waiters) > 0 {
		w := b.waiters[0]
		if !b.take(w.n, false) {
			return
		}
		b.waiters[0] = nil
		b.waiters = b.waiters[1:]
		b.nwait.Store(int64(len(b.waiters)))
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
	used, limit := b.used.Load(), b.limit.Load()
	s.mu.Lock()
	received := b.received.Load()
	for c := range s.conns {
		received += c.received.Load()
	}
	s.mu.Unlock()
	return ContentStats{Received: received, Reserved: used, Peak: b.peak.Load(), Limit: limit}
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
