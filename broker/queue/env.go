package queue

import (
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/stats"
	"github.com/brokerd/brokerd/internal/ratelog"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/ttl"
)

// Env is what the queue engine needs from its owner, gathered in one
// place: the store and what reports on it, the clock and the timer
// scheduler, the counters and logs, the background tasks, the consumer
// timeout in force, and the two calls back up (storeAlarm, expired).
// A queue reaches it through Queue.env, never through its vhost's
// broker; the Broker embeds it. It is the seam the queue engine's own
// Package will take as its Env (issue 24): the engine will then import
// nothing of the broker.
//
// The fields are set by Open and not changed after, except those whose
// comments say otherwise.
type Env struct {
	cfg   Config
	Log   *slog.Logger
	Store store.Store
	// storeFailedFn is storeFailed as a func value made once: the
	// completion of a store write nobody waits for (txn.write).
	storeFailedFn func(error)
	StoreErr      atomic.Pointer[error] // the store's first failure (storeFailed)
	// storeAlarm raises the store alarm; storeFailure calls it on a
	// goroutine of its own (the alarm takes Broker.mu, which storeFailed's
	// callers may not).
	storeAlarm func()
	// expired deletes a queue whose x-expires lease ran out; called with
	// no lock held.
	expired func(q *Queue)

	Counters stats.Counters
	cycles   cycleLog
	dropLog  [stats.NumDropCauses]*ratelog.Limiter // nil for stats.DropNoDLX; see newDropLogs
	readLog  *ratelog.Limiter                      // store reads retried (readretry.go)
	// releaseLog warns of delayed messages that found no queue at their
	// due time (delayed.go).
	releaseLog *ratelog.Limiter

	Timers *ttl.Scheduler // message deadlines and queue leases
	// Horizon is the latest deadline the store's expiry keys have been
	// scanned to (pagedexpiry.go); the scan, the broker's, stores it.
	Horizon     atomic.Int64
	horizonScan horizonState // the scan's progress (StartHorizon)

	// async counts background tasks (paging prefetches, read retries,
	// mark-write completions); asyncMu guards asyncClosed (after which
	// none starts), asyncN and asyncIdle. It takes no lock while held and
	// is taken under queue locks and inside store completions (doc.go).
	async       sync.WaitGroup
	asyncMu     sync.Mutex
	asyncClosed bool
	asyncN      int        // tasks running, guarded by asyncMu
	asyncIdle   *sync.Cond // on asyncMu: broadcast when asyncN drops to 0

	// minConsumerTimeout is at most every consumer timeout in force (ms;
	// it only decreases): deliveries younger than it are not checked.
	minConsumerTimeout atomic.Int64
	// consumerTimeoutMs is the broker's consumer timeout in ms, -1 for
	// none (Options.ConsumerTimeout, SetConsumerTimeout).
	consumerTimeoutMs atomic.Int64
}

// Config are the engine's settings (the broker's Options that concern it).
type Config struct {
	// Now is the clock.
	Now func() time.Time
	// PageWindow and PageWindowBytes bound the ready entries of a priority
	// level kept in memory (0: no paging); DeliveredMarkChunk is how far
	// ahead of deliveries a durable queue's delivered mark is written.
	PageWindow         int
	PageWindowBytes    int64
	DeliveredMarkChunk int
	// Lease, if set, is the cluster leader's lease on deliveries
	// (lease.go): nothing is delivered while it lapses.
	Lease Lease
}

// NewEnv returns an engine environment over st. alarm raises the store
// alarm (storeAlarm); expired deletes a queue whose lease ran out. The
// owner sets timers before any queue is made.
func NewEnv(cfg Config, log *slog.Logger, st store.Store, alarm func(), expired func(q *Queue)) *Env {
	b := &Env{cfg: cfg, Log: log, Store: st, storeAlarm: alarm, expired: expired}
	b.storeFailedFn = b.storeFailed
	b.dropLog = newDropLogs(log)
	b.readLog = newReadLog(log)
	b.releaseLog = newReleaseLog(log)
	b.minConsumerTimeout.Store(math.MaxInt64)
	return b
}

// Lease returns the lease deliveries wait for (Config.Lease), nil if none.
func (b *Env) Lease() Lease { return b.cfg.Lease }

// StopAsync waits for the background tasks to end; none starts after.
func (b *Env) StopAsync() {
	b.asyncMu.Lock()
	b.asyncClosed = true
	b.asyncMu.Unlock()
	b.async.Wait()
}

// StopLogs stops the rate-limited logs, each logging what it counted
// since its last line.
func (b *Env) StopLogs() {
	for _, l := range b.dropLog {
		if l != nil {
			l.Stop()
		}
	}
	b.readLog.Stop()
	b.releaseLog.Stop()
}

// SetConsumerTimeoutMs sets the broker's consumer timeout, ms (-1: none).
func (b *Env) SetConsumerTimeoutMs(ms int64) {
	b.consumerTimeoutMs.Store(ms)
	if ms >= 0 {
		// A raised timeout leaves the check bound low: it only costs
		// looking at deliveries sooner than needed.
		b.noteConsumerTimeout(ms)
	}
}

// ConsumerTimeoutBound is at most every consumer timeout in force (ms):
// deliveries younger than it need no check.
func (b *Env) ConsumerTimeoutBound() int64 { return b.minConsumerTimeout.Load() }

// goAsync registers a background task (call asyncDone when it ends), or
// reports false once the broker is closing.
func (b *Env) goAsync() bool {
	b.asyncMu.Lock()
	defer b.asyncMu.Unlock()
	if b.asyncClosed {
		return false
	}
	b.async.Add(1)
	b.asyncN++
	return true
}

func (b *Env) asyncDone() {
	b.asyncMu.Lock()
	if b.asyncN--; b.asyncN == 0 && b.asyncIdle != nil {
		b.asyncIdle.Broadcast()
	}
	b.asyncMu.Unlock()
	b.async.Done()
}

// WaitAsyncIdle waits until no background task runs (for tests: one may
// start right after).
func (b *Env) WaitAsyncIdle() {
	b.asyncMu.Lock()
	defer b.asyncMu.Unlock()
	if b.asyncIdle == nil {
		b.asyncIdle = sync.NewCond(&b.asyncMu)
	}
	for b.asyncN > 0 {
		b.asyncIdle.Wait()
	}
}

// storeFailed records a store failure. Store errors are sticky: the
// broker keeps serving what it has in memory, but every operation that
// needs the store fails (publishers get nacks) and the failure is logged
// once.
func (b *Env) storeFailed(err error) {
	if err != nil {
		b.storeFailure(err) // apart, so a nil err is not moved to the heap
	}
}

func (b *Env) storeFailure(err error) {
	if b.StoreErr.CompareAndSwap(nil, &err) {
		b.Log.Error("message store failed; persistent operations will fail", "err", err)
		// Publishers are blocked, as by a disk alarm: the store accepts
		// nothing more (its errors are sticky) and the broker never
		// pretends to be durable. The alarm is raised off this goroutine:
		// storeFailed may run under queue locks, and Broker.mu is taken
		// alone.
		go b.storeAlarm()
	}
}

// Host is what the queues of one vhost share, as the engine sees it: the
// vhost's name, its routing (dead letters and redrives are routed within
// it), and two counters its topology changes read. The broker's VHost
// embeds it.
type Host struct {
	Name   string
	Router Router
	// Waiting counts the dead letters waiting in the backlogs of its
	// queues, so a topology change with none waiting scans nothing.
	Waiting atomic.Int64
	// TopoGen counts topology changes that may give waiting dead letters
	// a route (backlog.go).
	TopoGen atomic.Uint64
}

// Router is a vhost's topology as the engine uses it: to route a dead
// letter or a redriven message, and to find a redrive's origin queue. The
// Locked calls are made between RLock and RUnlock, which a txn holds from
// the first routing until its batch is applied (Txn.hold), so no target
// can be deleted between routing to it and the put that gives it a copy.
// The lock is taken with a queue's lock held, never the other way round.
type Router interface {
	RLock()
	RUnlock()
	// HasExchangeLocked reports whether the exchange named name exists.
	HasExchangeLocked(name string) bool
	// RouteLocked returns the queues the exchange named exchange routes
	// keys and headers to (alternate exchanges, exchange-to-exchange
	// bindings and CC/BCC included), each once; none if it does not
	// exist.
	RouteLocked(exchange string, keys []string, headers amqp.Table) []*Queue
	// QueueLocked returns the queue named name, nil if there is none.
	QueueLocked(name string) *Queue
	// IsHoldLocked reports whether hold is the holding queue of the
	// delayed exchange named exchange (delayed.go): false once the
	// exchange is deleted, or replaced.
	IsHoldLocked(exchange string, hold *Queue) bool
}

// noteConsumerTimeout lowers the bound below which deliveries are not
// checked to ms (a timeout now in force; -1: none).
func (b *Env) noteConsumerTimeout(ms int64) {
	if ms < 0 {
		return
	}
	for {
		cur := b.minConsumerTimeout.Load()
		if ms >= cur || b.minConsumerTimeout.CompareAndSwap(cur, ms) {
			return
		}
	}
}

// globalConsumerTimeout is Options.ConsumerTimeout in ms (as changed by
// SetConsumerTimeout), -1 for none.
func (b *Env) globalConsumerTimeout() int64 {
	return b.consumerTimeoutMs.Load()
}
