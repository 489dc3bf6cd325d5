package queue

// Views of a queue's internals and hooks into it, for tests only (the
// broker's export_test.go hands them to its external tests): nothing in
// the broker calls them.

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/brokerd/brokerd/ttl"
)

// ResidentForTest returns how many of q's ready entries are in memory
// (live or removed but still held) and its ready count, middles included.
func (q *Queue) ResidentForTest() (resident, ready int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range q.ready.Levels() {
		l := q.ready.Level(uint8(i))
		resident += l.Head.Len() + l.Tail.Len()
	}
	return resident, q.ready.Len()
}

// ResidentBytesForTest returns the resident bytes (bodies and properties)
// of q's ready entries in memory (live or removed but still held).
func (q *Queue) ResidentBytesForTest() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ready.Resident()
}

// BacklogResidentForTest returns how many of q's waiting dead letters
// are held in memory.
func (q *Queue) BacklogResidentForTest() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.backlog)
}

// PagedTimersForTest returns how many of q's paged entries have a timer
// (pagedexpiry.go: their deadline is within the horizon scanned).
func (q *Queue) PagedTimersForTest() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.paged)
}

// ReadAheadPendingForTest returns how many of q's paged entries are due
// to be read ahead of their deadline (their read-ahead timer's time has
// come) and not read yet.
func (q *Queue) ReadAheadPendingForTest() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	now, n := q.Env.NowMS(), 0
	for _, pt := range q.paged {
		if pt.pre == nil && pt.timer.Deadline <= now {
			n++
		}
	}
	return n
}

// CountDueReadsForTest counts the reads of paged entries ahead of their
// deadlines from now on, and the entries they read; restore stops it.
func CountDueReadsForTest() (reads, entries *atomic.Int64, restore func()) {
	reads, entries = new(atomic.Int64), new(atomic.Int64)
	dueReadHook = func(n int) {
		reads.Add(1)
		entries.Add(int64(n))
	}
	return reads, entries, func() { dueReadHook = nil }
}

// EvictionOwedForTest returns how many publishes wait for q's drop-head
// eviction (its head is being read back from the store); 0 while q's lock
// is held (a test that polls must not wait behind a lock held across a
// read).
func (q *Queue) EvictionOwedForTest() int {
	if !q.mu.TryLock() {
		return 0
	}
	defer q.mu.Unlock()
	return len(q.evictWaiters)
}

// GetWaitingForTest reports whether a basic.get on q waits for its head
// to be read back from the store (false while q's lock is held).
func (q *Queue) GetWaitingForTest() bool {
	if !q.mu.TryLock() {
		return false
	}
	defer q.mu.Unlock()
	return q.fillWake != nil
}

// MarksForTest returns q's durable delivered marks, per level.
func (q *Queue) MarksForTest() []uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.marks)
}

// PagedOutCapture holds the entries that paged out while it was set.
type PagedOutCapture struct {
	mu sync.Mutex
	es []*Entry
}

// CapturePagedOutForTest records every entry that pages out from now on
// (set it before the broker has connections); restore stops it.
func CapturePagedOutForTest() (c *PagedOutCapture, restore func()) {
	c = &PagedOutCapture{}
	pagedOutHook = func(e *Entry) {
		c.mu.Lock()
		c.es = append(c.es, e)
		c.mu.Unlock()
	}
	return c, func() { pagedOutHook = nil }
}

// FireStale hands the resident timers of the captured entries that have
// a deadline to fire (the owner's timer callback), as the scheduler does
// when it took them just before they paged out; it returns how many.
func (c *PagedOutCapture) FireStale(fire func([]*ttl.Timer)) int {
	c.mu.Lock()
	var due []*ttl.Timer
	for _, e := range c.es {
		if e.Deadline != 0 {
			due = append(due, &e.timer)
		}
	}
	c.mu.Unlock() // expiry pages entries out too
	fire(due)
	return len(due)
}

// releaseHook and cancelReadHook, if set (by tests), run with the holding
// queue concerned: releaseHook on the scheduler's goroutine as it is about
// to release the due messages of a holding queue (before it takes the
// queue's lock); cancelReadHook when Cancel has read the paged messages it
// takes, before it locks the queue again to take them. Atomic: brokers of
// other tests run beside the one that sets them.
var releaseHook, cancelReadHook atomic.Pointer[func(*Queue)]

func runHook(h *atomic.Pointer[func(*Queue)], q *Queue) {
	if fn := h.Load(); fn != nil {
		(*fn)(q)
	}
}

// SetReleaseHookForTest sets releaseHook to fn until restore is called.
func SetReleaseHookForTest(fn func(*Queue)) (restore func()) {
	releaseHook.Store(&fn)
	return func() { releaseHook.Store(nil) }
}

// SetCancelReadHookForTest sets cancelReadHook to fn until restore is
// called.
func SetCancelReadHookForTest(fn func(*Queue)) (restore func()) {
	cancelReadHook.Store(&fn)
	return func() { cancelReadHook.Store(nil) }
}

// GateDueReadsForTest holds each read of paged entries ahead of their
// deadlines from now on until release is called; entered receives the
// number of refs of each read as it is held. restore lets reads through
// and stops it.
func GateDueReadsForTest() (entered <-chan int, release func(), restore func()) {
	in := make(chan int, 64)
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	dueReadHook = func(n int) {
		in <- n
		<-gate
	}
	return in, release, func() { release(); dueReadHook = nil }
}

// ExpiryWaitingForTest returns how many of q's expired entries wait for a
// read of entries ahead of them (waitForReadsLocked).
func (q *Queue) ExpiryWaitingForTest() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.expWait)
}
