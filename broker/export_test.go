package broker

// Hooks for the external tests (package broker_test), compiled only into
// tests.

import (
	"sync/atomic"

	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/store"
)

// VHostLockedForTest reports whether vhost's lock is held (or waited for)
// exclusively: a store hook calls it to see whether a definition reaches
// the store under the lock that made it.
func (b *Broker) VHostLockedForTest(vhost string) bool {
	v := b.VHost(vhost)
	if v.mu.TryRLock() {
		v.mu.RUnlock()
		return false
	}
	return true
}

// DefsForTest builds definition records exactly as the broker writes them,
// so a test can put into a store what the broker never would (dangling
// definitions).
type DefsForTest struct{ m defs.Batch }

// VHost writes a vhost record without metadata: the layout of a broker
// from before vhosts had metadata.
func (d *DefsForTest) VHost(name string) { d.m.Put(defs.EncodeVHost(defs.VHost{Name: name})) }

// Permission writes a permission record (its user or vhost may not exist).
func (d *DefsForTest) Permission(vhost, user, configure, write, read string) {
	d.m.Put(defs.EncodePerm(defs.Perm{VHost: vhost, User: user, Configure: configure, Write: write, Read: read}))
}

func (d *DefsForTest) Exchange(vhost, name, typ string) {
	d.m.Put(defs.EncodeExchange(defs.Exchange{VHost: vhost, Name: name, Type: typ}))
}

func (d *DefsForTest) Queue(vhost, name string, id store.QueueID) {
	d.m.Put(defs.EncodeQueue(defs.Queue{VHost: vhost, Name: name, ID: uint64(id)}))
}

func (d *DefsForTest) QueueBinding(vhost, source, queue, key string) {
	d.m.Put(defs.EncodeBinding(defs.Binding{VHost: vhost, Source: source, Dest: queue, Key: key}))
}

func (d *DefsForTest) ExchangeBinding(vhost, source, dest, key string) {
	d.m.Put(defs.EncodeBinding(defs.Binding{VHost: vhost, Source: source, Dest: dest, ToExchange: true, Key: key}))
}

func (d *DefsForTest) Policy(vhost, name, pattern string, def map[string]any) {
	d.m.Put(defs.EncodePolicy(defs.Policy{VHost: vhost, Name: name, Pattern: pattern, ApplyTo: "all", Definition: def}))
}

func (d *DefsForTest) OperatorPolicy(vhost, name, pattern string, def map[string]any) {
	d.m.Put(defs.EncodePolicy(defs.Policy{Operator: true, VHost: vhost, Name: name, Pattern: pattern, ApplyTo: "all", Definition: def}))
}

// Ops returns the records built so far.
func (d *DefsForTest) Ops() []store.MetaOp { return d.m.Ops }

func (b *Broker) queueForTest(vhost, queue string) *queue.Queue {
	v := b.VHost(vhost)
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.topo.Queues[queue]
}

// holdForTest returns the holding queue of delayed exchange exchange.
func (b *Broker) holdForTest(vhost, exchange string) *queue.Queue {
	v := b.VHost(vhost)
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.topo.Exchanges[exchange].Hold
}

// HeldResidentForTest returns how many of the messages delayed exchange
// exchange holds are in memory, how many it holds, and how many of those
// in the store only have a timer (a read ahead of their due time armed).
func (b *Broker) HeldResidentForTest(vhost, exchange string) (resident, held, armed int) {
	q := b.holdForTest(vhost, exchange)
	resident, held = q.ResidentForTest()
	return resident, held, q.PagedTimersForTest()
}

// ResidentForTest returns how many of queue's ready entries are in memory
// (live or removed but still held) and its ready count, middles included.
func (b *Broker) ResidentForTest(vhost, queue string) (resident, ready int) {
	return b.queueForTest(vhost, queue).ResidentForTest()
}

// ResidentBytesForTest returns the resident bytes (bodies and properties)
// of queue's ready entries in memory (live or removed but still held).
func (b *Broker) ResidentBytesForTest(vhost, queue string) int64 {
	return b.queueForTest(vhost, queue).ResidentBytesForTest()
}

// BacklogResidentForTest returns how many of queue's waiting dead letters
// are held in memory.
func (b *Broker) BacklogResidentForTest(vhost, queue string) int {
	return b.queueForTest(vhost, queue).BacklogResidentForTest()
}

// ReadAheadPendingForTest returns how many of queue's paged entries are
// due to be read ahead of their deadline (their read-ahead timer's time
// has come) and not read yet.
func (b *Broker) ReadAheadPendingForTest(vhost, queue string) int {
	return b.queueForTest(vhost, queue).ReadAheadPendingForTest()
}

// SetConsumerAddedHookForTest makes f run once each basic.consume has
// added its consumer, before the queue dispatches to it; the returned
// function removes it.
func SetConsumerAddedHookForTest(f func()) (restore func()) {
	consumerAddedHook = f
	return func() { consumerAddedHook = nil }
}

// PagedOutCapture holds the entries that paged out while it was set.
type PagedOutCapture = queue.PagedOutCapture

// CapturePagedOutForTest records every entry that pages out from now on
// (set it before the broker has connections); restore stops it.
func CapturePagedOutForTest() (c *PagedOutCapture, restore func()) {
	return queue.CapturePagedOutForTest()
}

// CountDueReadsForTest counts the reads of paged entries ahead of their
// deadlines from now on (set it before the broker has connections), and
// the entries they read; restore stops it.
func CountDueReadsForTest() (reads, entries *atomic.Int64, restore func()) {
	return queue.CountDueReadsForTest()
}

// FireStaleForTest hands the resident timers of the entries c captured
// that have a deadline to b's expiry, as the scheduler does when it took
// them just before they paged out; it returns how many.
func (b *Broker) FireStaleForTest(c *queue.PagedOutCapture) int { return c.FireStale(b.env.FireTimers) }

// EvictionOwedForTest returns how many publishes wait for queue's
// drop-head eviction (its head is being read back from the store); 0
// while the queue's lock is held.
func (b *Broker) EvictionOwedForTest(vhost, queue string) int {
	return b.queueForTest(vhost, queue).EvictionOwedForTest()
}

// GetWaitingForTest reports whether a basic.get on queue waits for its
// head to be read back from the store (false while the queue's lock is
// held).
func (b *Broker) GetWaitingForTest(vhost, queue string) bool {
	return b.queueForTest(vhost, queue).GetWaitingForTest()
}

// SettleTimersForTest waits until every timer due by the broker's timer
// clock has fired, with the store reads that expiry started for paged
// entries: after a fake clock moves, what is due has happened (what
// follows a store write, a dead-lettered copy reaching its target, may
// still be on its way).
func (b *Broker) SettleTimersForTest() {
	for range 3 { // a read's merge may arm timers already due
		b.env.Timers.Sync()
		b.env.WaitAsyncIdle()
	}
}

// CheckConsumerTimeoutsForTest runs one consumer timeout check now.
func (b *Broker) CheckConsumerTimeoutsForTest() { b.checkConsumerTimeouts() }

// RetryBacklogsForTest runs one pass of the periodic dead-letter backlog
// retry over every vhost now, with the reads it starts.
func (b *Broker) RetryBacklogsForTest() {
	b.retryAllBacklogs()
	b.env.WaitAsyncIdle()
}

// StoreFailureForTest returns the error that failed the broker's store,
// nil while it has not.
func (b *Broker) StoreFailureForTest() error {
	if p := b.env.StoreErr.Load(); p != nil {
		return *p
	}
	return nil
}

// PreUsersLayoutForTest returns the operations that turn the definitions
// in s into what a broker from before stored users wrote: no users, no
// permissions, no bootstrap mark (vhosts and the rest as they are).
func PreUsersLayoutForTest(s store.Store) ([]store.MetaOp, error) {
	var ops []store.MetaOp
	for _, prefix := range []string{defs.PrefixUser, defs.PrefixPerm, defs.KeyBootstrapMark} {
		err := s.ScanMeta(prefix, func(k string, _ []byte) bool {
			ops = append(ops, store.MetaOp{Key: k})
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	return ops, nil
}

// RaceEnabledForTest reports whether the tests run under the race
// detector, whose shadow memory makes heap figures meaningless.
const RaceEnabledForTest = raceEnabled

// StoredOriginsForTest returns the dead-letter records (nil for none) of
// queue's stored entries, in seq order, as the store holds them.
func (b *Broker) StoredOriginsForTest(vhost, queue string) ([]*store.Origin, error) {
	q := b.queueForTest(vhost, queue)
	var out []*store.Origin
	err := b.env.Store.ScanQueue(q.ID, 0, func(e *store.Entry) bool {
		out = append(out, e.Origin)
		return true
	})
	return out, err
}

// SetReleaseHookForTest makes fn run on the timer scheduler's goroutine
// whenever it is about to release due messages of delayed exchange
// exchange of vhost, before it takes the holding queue's lock (so fn may
// hold the release there); restore removes it.
func (b *Broker) SetReleaseHookForTest(vhost, exchange string, fn func()) (restore func()) {
	hold := b.holdForTest(vhost, exchange)
	return queue.SetReleaseHookForTest(func(q *queue.Queue) {
		if q == hold {
			fn()
		}
	})
}

// SetCancelReadHookForTest makes fn run when a cancel of messages of
// delayed exchange exchange of vhost has read the paged ones it takes,
// before it locks the holding queue again to take them; restore removes
// it.
func (b *Broker) SetCancelReadHookForTest(vhost, exchange string, fn func()) (restore func()) {
	hold := b.holdForTest(vhost, exchange)
	return queue.SetCancelReadHookForTest(func(q *queue.Queue) {
		if q == hold {
			fn()
		}
	})
}

// GateDueReadsForTest holds each read of paged entries ahead of their
// deadlines from now on (set it before the broker has connections) until
// release; entered receives the number of refs of each read held.
func GateDueReadsForTest() (entered <-chan int, release, restore func()) {
	return queue.GateDueReadsForTest()
}

// ExpiryWaitingForTest returns how many of queue's expired entries wait
// for a read of paged entries ahead of them.
func (b *Broker) ExpiryWaitingForTest(vhost, queue string) int {
	return b.queueForTest(vhost, queue).ExpiryWaitingForTest()
}
