package queue

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/policy"
	"github.com/brokerd/brokerd/broker/queue/engine"
	"github.com/brokerd/brokerd/broker/stats"
	"github.com/brokerd/brokerd/deadletter"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/ttl"
)

type entryState uint8

const (
	stReady   entryState = iota // in the ready list
	stUnacked                   // delivered, awaiting ack
	stBacklog                   // waiting in the dead-letter backlog (at-least-once)
	stGone                      // settled, dropped or dead-lettered
	// stPaged: the entry paged out. The store holds it, and it comes back
	// as a new entry read from there; this one is left only to a timer
	// that had fired already, which must let it be.
	stPaged
	// stParked: returned and waiting out a retry delay in q.parked
	// (retry.go).
	stParked
)

// Entry is a message's place in a queue, with the in-memory state that is
// not persisted.
type Entry struct {
	store.Entry
	q     *Queue
	state entryState
	// Redelivered is set once the entry has been delivered and returned,
	// or recovered after a restart (it may have been delivered before).
	Redelivered bool
	// stored reports whether the entry is in the store (persistent
	// message in a durable queue): settling it writes a delete.
	stored bool
	// inStore is set once the batch putting a stored entry has been
	// handed to the store (txn.write), so a read of the store finds it:
	// only then may the entry leave memory (engine.Ready.PageOut).
	inStore bool
	// prio is the message's priority property (0 without one).
	prio uint8
	// zeroTTL marks a message whose TTL was 0: deliverable only to a
	// consumer that takes it the moment it arrives.
	zeroTTL bool
	// arriving is set while the entry is offered to consumers on arrival,
	// when a TTL of 0 does not yet stop its delivery.
	arriving bool
	// timer fires at Deadline while the entry is ready.
	timer ttl.Timer
}

func (e *Entry) BodySize() int { return len(e.Msg.Body) }

// expiredAt reports whether e's deadline has passed at now. A TTL-0
// message has expired once it was not delivered at once (arriving), even
// within the millisecond it arrived in (its deadline is rounded up).
func (e *Entry) expiredAt(now int64) bool {
	return e.Deadline != 0 && (e.Deadline <= now || e.zeroTTL)
}

// Queue is a message queue. Definition fields are fixed at declaration.
//
// Concurrency: a queue is guarded by its own mutex, mu, which only this
// package takes (doc.go has the lock order). Code holding mu may take its
// Router's lock shared (to route dead letters) or, through Delete's
// unlink, its vhost's exclusively, a Channel's lock (to hand it a
// delivery) and a connection's write lock. It never takes another queue's
// lock, except an enqueue or commit, which locks all its queues in id
// order before touching any. No code takes a queue lock while holding a
// vhost lock.
type Queue struct {
	Name       string
	Durable    bool
	Exclusive  bool
	AutoDelete bool
	Args       amqp.Table

	ID          store.QueueID
	spilled     bool // transient entries were written to the volatile range (spill.go)
	Type        string
	Env         *Env  // what the engine needs from its owner (env.go)
	Host        *Host // the vhost it lives in
	maxPriority uint8 // x-max-priority; 0 = no priorities
	sac         bool  // x-single-active-consumer
	Owner       any   // exclusive owner (the broker's connection; the engine does not use it); nil otherwise
	// holdFor names the delayed exchange whose messages q holds until
	// they are due (delayed.go); "" for every other queue.
	holdFor string

	cfg     atomic.Pointer[Settings] // effective settings (arguments + policy)
	Seq     atomic.Uint64            // last assigned sequence number
	readyN  atomic.Int64             // mirrors ready.len() for lock-free readers
	readyB  atomic.Int64             // mirrors ready.Bytes()
	deleted atomic.Bool              // set under mu
	Stats   stats.Queue

	// delayedN and delayedB mirror len(parked) and parkedB (retry.go),
	// for lock-free readers.
	delayedN, delayedB atomic.Int64

	// Room claimed by dead-lettered copies planned into this queue but
	// not inserted yet (see reserve). resMu takes no lock while held; it
	// is taken under this queue's mu, or under a dead letter's source
	// queue lock with the vhost's held shared.
	resMu sync.Mutex
	pendN int64
	pendB int64
	// inflight are the seqs of dead-lettered copies allocated for this
	// queue (their puts may be in the store already) and not inserted
	// yet: the middle of a level must not reach past them.
	inflight []uint64

	// mu guards every field after it, and its entries' mutable fields
	// (state, Redelivered, inStore, arriving, their timers). The fields
	// above resMu are fixed at declaration but spilled (mu) and the
	// atomics. Under mu a queue takes, in doc.go's order, its Router's
	// lock shared or its vhost's exclusively, a Channel's lock, any
	// queue's resMu, a RedriveRecorder's lock, the cycle log's,
	// Env.asyncMu, the scheduler's, a connection's and the store's; never
	// another queue's mu except in lockQueues' id order. It is taken
	// under the owner's policyMu and authMu, never under its VHost.mu,
	// channel.mu or Broker.mu.
	mu          sync.Mutex
	ready       readyQueue
	unacked     int
	backlog     []*Entry    // dead letters waiting for a route found among recovered entries (an older layout; backlog.go holds the rest)
	consumers   []*Consumer // highest priority first; round-robin within a priority
	exclusiveC  bool        // the single consumer is exclusive
	hadConsumer bool
	lease       ttl.Timer   // x-expires: fires when the queue has been unused too long
	recovering  bool        // loading stored entries: timers start after policies apply
	closing     bool        // being deleted (lease ran out, or queue.delete checked): takes no new consumer
	deletion    *StoreWrite // the store write of the queue's deletion, once deleted

	// parked are the returned entries waiting out a retry delay, and
	// parkedB their body bytes (retry.go).
	parked  map[*Entry]struct{}
	parkedB int64

	// backlogGen is the vhost's topology generation at the last retry of
	// the dead-letter backlog; backlogFull records that a target refused
	// a dead letter then (it may have room later even if nothing changed).
	backlogGen  uint64
	backlogFull bool

	// The stored backlog (backlog.go): how many dead letters wait in the
	// backlog range, the range's last seq, a retry pass under way (and
	// another asked for), and a generation a purge or deletion changes.
	blStored   int
	blStayed   int // dead letters of the chunk being retried that found no route
	blSeq      uint64
	blVolatile bool // transient dead letters were written to the volatile backlog range
	blRetrying bool
	blAgain    bool
	blGen      uint64

	// recoveredSeq is the last seq when the queue was recovered from its
	// counters (backlogUnread set): a dead letter waiting for a route
	// found among entries up to it joins the backlog then (fillLocked).
	recoveredSeq  uint64
	backlogUnread bool
	// BacklogMarked mirrors the stored definition's backlog flag: set
	// while stored dead letters may wait in the backlog.
	BacklogMarked bool
	pageBuf       []store.EntryMeta // fillLocked's read buffer
	pageRetry     bool              // a failed page-in read is to be made again (retryPageLocked)
	pageIDs       []store.MsgID
	// paged are the timers of entries in a middle whose deadline is
	// within the broker's horizon, by seq (see pagedexpiry.go).
	paged map[uint64]*pagedTimer
	// expReads are the reads of due paged entries under way
	// (expireRead), numbered from expGen; expWait the expired entries
	// that wait for some of them, which read entries ahead of theirs
	// (waitForReadsLocked in expiry.go: dead letters leave in queue
	// order).
	expGen   uint64
	expReads []*expRead
	expWait  []expWait

	// Delivered marks per level (deliveredmarks.go): durable, asked for (written,
	// maybe not durable yet), and as recovered. markWaiting is set when
	// a delivery waits for a mark write, markWake when a basic.get does.
	marks, markAsked, recMarks []uint64
	// delivered is each level's highest seq delivered since the start;
	// marksFinal is set once a clean stop took the exact marks
	// (finalMarksLocked).
	delivered   []uint64
	marksFinal  bool
	markWaiting bool
	markWake    chan struct{}
	// markPending counts the mark writes under way, markDone those
	// completed (deliverDue tells from them whether a dispatch saw the
	// final marks).
	markPending int
	markDone    uint64
	// fillWake is the wait of basic.gets for a read of a middle
	// (fillWaitLocked).
	fillWake *FillWait
	// evictWaiters are the completions of publishes that took q over a
	// drop-head limit while its head was being read back: they run once
	// the eviction is written (prefetchLocked).
	evictWaiters []func(error)
	// damaged are entries a read found lost to damaged data, taken out
	// of the ready list and not yet deleted from the store (damage.go).
	damaged []damagedEntry
	// damageLogged holds the damaged places (file@offset) already logged
	// for this queue.
	damageLogged map[string]bool
}

// Consumer is a basic.consume subscription.
type Consumer struct {
	Tag       string
	Ch        Channel
	Queue     *Queue
	NoAck     bool
	Exclusive bool
	Priority  int64
	Prefetch  int // per-consumer prefetch count; 0 = unlimited
	Unacked   int // guarded by ch.mu
}

// Channel is a consumer's channel as the queue sees it: the queue
// hands it a delivery (tryDeliver, with q.mu held: it takes the channel's
// lock, never a queue's) and, when the queue goes, has it cancel the
// consumer (serverCancel, with no queue lock held). The channel is its
// one implementation; the queue knows nothing else of it.
type Channel interface {
	TryDeliver(c *Consumer, q *Queue, e *Entry, props []byte) bool
	ServerCancel(c *Consumer)
	// recordGet numbers a basic.get's delivery of e (with q.mu held) and,
	// unless noAck, keeps it unacknowledged.
	RecordGet(q *Queue, e *Entry, noAck bool) uint64
}

// New builds a queue from its declaration; arguments were validated.
func New(env *Env, h *Host, id store.QueueID, name string, durable, exclusive, autoDelete bool, args amqp.Table) *Queue {
	q := &Queue{Name: name, Durable: durable, Exclusive: exclusive, AutoDelete: autoDelete, Args: args, Host: h, Env: env, ID: id, Type: TypeOf(args)}
	if x, ok := args.Get("x-max-priority"); ok {
		if n, ok := amqp.AsInt(x); ok && n > 0 {
			q.maxPriority = uint8(min(n, 255))
		}
	}
	if x, ok := args.Get("x-single-active-consumer"); ok {
		q.sac, _ = x.(bool)
	}
	q.ready = engine.NewReady[*Entry](q.maxPriority)
	if q.Env != nil && q.Env.cfg.PageWindow > 0 {
		q.ready.Window = q.Env.cfg.PageWindow
		q.ready.WindowBytes = max(q.Env.cfg.PageWindowBytes, 0)
		q.ready.Fill = q.fillLocked
		q.ready.Prefetch = func(l *level) { q.prefetchLocked(l) }
		q.ready.Paged = q.pagedOutLocked
	}
	q.InitMarks(nil)
	q.lease.Value = q
	cfg := resolveQueueConfig(q.Type, args, nil)
	q.cfg.Store(&cfg)
	if q.Env != nil {
		q.Env.noteConsumerTimeout(cfg.consumerTimeout)
	}
	return q
}

func (q *Queue) Settings() *Settings { return q.cfg.Load() }

// addBacklogLocked and takeBacklogLocked change the dead-letter backlog,
// keeping the vhost's count of waiting dead letters in step.
func (q *Queue) addBacklogLocked(e *Entry) {
	q.backlog = append(q.backlog, e)
	q.Host.Waiting.Add(1)
}

func (q *Queue) takeBacklogLocked() []*Entry {
	es := q.backlog
	q.backlog = nil
	q.Host.Waiting.Add(-int64(len(es)))
	return es
}

// isStoredFor reports whether m's entries in q are persisted: persistent
// messages in durable queues, and every message of a quorum queue (as
// RabbitMQ's quorum queues keep transient messages too: reference B62;
// the message keeps its delivery mode). An exclusive queue is gone after
// a restart, so its messages never need the store.
func (q *Queue) isStoredFor(m *store.Message) bool {
	return q.Durable && !q.Exclusive && (m.Persistent || q.Type == policy.QueueQuorum)
}

func (q *Queue) isDeleted() bool { return q.deleted.Load() }

// DeclareCounts returns what queue.declare-ok reports: the messages (the
// ready ones and the dead letters waiting for a route in the backlog,
// which count as messages though none can be delivered: SPEC §2) and the
// consumers.
func (q *Queue) DeclareCounts() (messages, consumers int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ready.Len() + q.backlogLen(), len(q.consumers)
}

// newEntry makes the entry for msg entering q at at, with the deadline
// from the queue's message TTL and msgTTL (the expiration property, -1 if
// none).
func (q *Queue) newEntry(msg *store.Message, h *store.Header, prio uint8, msgTTL int64, at *arrival) *Entry {
	return q.initEntry(new(Entry), msg, h, prio, msgTTL, at)
}

// initEntry is newEntry in memory the caller provides (the publish's own,
// publishAlloc), which must be zero.
func (q *Queue) initEntry(e *Entry, msg *store.Message, h *store.Header, prio uint8, msgTTL int64, at *arrival) *Entry {
	e.q, e.prio, e.stored = q, prio, q.isStoredFor(msg)
	e.Ref = store.Ref{Queue: q.ID, Prio: min(prio, q.maxPriority), Seq: q.Seq.Add(1)}
	e.Msg, e.Header = msg, h
	ttlMS := q.Settings().messageTTL
	if msgTTL >= 0 && (ttlMS < 0 || msgTTL < ttlMS) {
		ttlMS = msgTTL
	}
	if ttlMS >= 0 {
		e.Deadline = at.get() + ttlMS
		e.zeroTTL = ttlMS == 0
	}
	e.timer.Value = e
	return e
}

// newCopyEntry is newEntry for a dead-lettered copy or a released
// delayed message (msgTTL: its expiration, -1 for none), which reaches q
// (insertDeadLetters) after its put reached the store: its seq is
// recorded as in flight until then.
func (q *Queue) newCopyEntry(msg *store.Message, h *store.Header, prio uint8, msgTTL int64, at *arrival) *Entry {
	q.resMu.Lock()
	defer q.resMu.Unlock()
	e := q.newEntry(msg, h, prio, msgTTL, at)
	q.inflight = append(q.inflight, e.Seq)
	return e
}

// landed ends the flight of the copies es (see newCopyEntry).
func (q *Queue) landed(es []*Entry) {
	q.resMu.Lock()
	defer q.resMu.Unlock()
	if len(es) == 1 {
		if i, ok := slices.BinarySearch(q.inflight, es[0].Seq); ok {
			q.inflight = slices.Delete(q.inflight, i, i+1)
		}
		return
	}
	gone := make(map[uint64]bool, len(es))
	for _, e := range es {
		gone[e.Seq] = true
	}
	q.inflight = slices.DeleteFunc(q.inflight, func(s uint64) bool { return gone[s] })
}

// minInflight returns the lowest seq of a copy in flight to q, or the
// maximum seq if none is. (Seqs enter inflight in ascending order: they
// are allocated under resMu.)
func (q *Queue) minInflight() uint64 {
	q.resMu.Lock()
	defer q.resMu.Unlock()
	if len(q.inflight) == 0 {
		return math.MaxUint64
	}
	return q.inflight[0]
}

// reserve claims room for a dead-lettered copy of size bytes that will be
// inserted later (txn.finish). It fails when the copy would take a
// reject-publish queue over its limits, counting the copies already
// claimed, so limits stay exact however many copies are in flight.
func (q *Queue) reserve(size int) bool {
	q.resMu.Lock()
	defer q.resMu.Unlock()
	if q.Settings().limits.Refuses(int(q.readyN.Load()+q.delayedN.Load()+q.pendN), q.readyB.Load()+q.delayedB.Load()+q.pendB, size) {
		return false
	}
	q.pendN++
	q.pendB += int64(size)
	return true
}

// release gives back a claim made by reserve.
func (q *Queue) release(size int) {
	q.resMu.Lock()
	q.pendN--
	q.pendB -= int64(size)
	q.resMu.Unlock()
}

// pending returns the room claimed by copies in flight.
func (q *Queue) pending() (n int64, bytes int64) {
	q.resMu.Lock()
	defer q.resMu.Unlock()
	return q.pendN, q.pendB
}

// --- the ready list; every change goes through these --------------------

// limitLenLocked returns what q's length limits count: its ready
// messages and those waiting out a retry delay (as RabbitMQ 4.3 counts
// them), and their body bytes.
func (q *Queue) limitLenLocked() (int, int64) {
	return q.ready.Len() + len(q.parked), q.ready.Bytes() + q.parkedB
}

func (q *Queue) syncCounts() {
	q.readyN.Store(int64(q.ready.Len()))
	q.readyB.Store(q.ready.Bytes())
}

// makeReadyLocked puts e into the ready list (appended if append, else at
// its sequence position) and arms its expiry timer.
func (q *Queue) makeReadyLocked(e *Entry, appendIt bool) {
	e.state = stReady
	if appendIt {
		q.ready.PushBack(e)
	} else {
		q.ready.InsertSorted(e)
	}
	if !q.recovering {
		q.armLocked(e)
	}
	if l := q.ready.LevelOf(e); q.ready.TailOver(l) {
		q.pageOutLevelLocked(l, q.minInflight())
	}
	q.syncCounts()
}

// pageOutLocked pages out every level whose tail is over the window.
func (q *Queue) pageOutLocked() {
	if q.ready.Window <= 0 {
		return
	}
	limit := q.minInflight()
	for i := range q.ready.Levels() {
		if l := q.ready.Level(uint8(i)); q.ready.TailOver(l) {
			q.pageOutLevelLocked(l, limit)
		}
	}
}

// armLocked starts e's expiry timer if it has a deadline. A deadline
// already passed fires at once.
func (q *Queue) armLocked(e *Entry) {
	if e.Deadline != 0 && !e.zeroTTL {
		e.timer.Deadline = e.Deadline
		q.Env.Timers.Add(&e.timer)
	}
}

// ArmRecovered starts the timers of recovered entries, once the queue's
// policy is known (an expiry must use the dead letter exchange the policy
// sets).
func (q *Queue) ArmRecovered() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.readParkedLocked()
	q.recovering = false
	q.ready.Each(q.armLocked)
	for e := range q.parked {
		q.armParkedLocked(e)
	}
}

// takeLocked removes and returns the head of the ready list (nil if
// empty), disarming its timer.
func (q *Queue) takeLocked() *Entry {
	e := q.ready.PopFront()
	if e == nil {
		return nil
	}
	q.leaveReadyLocked(e)
	return e
}

// removeReadyLocked takes e out of the ready list from where it stands.
func (q *Queue) removeReadyLocked(e *Entry) {
	e.state = stGone
	q.ready.Remove(e)
	q.leaveReadyLocked(e)
}

func (q *Queue) leaveReadyLocked(e *Entry) {
	if e.Deadline != 0 {
		q.Env.Timers.Remove(&e.timer)
	}
	q.syncCounts()
}

// --- arrivals -----------------------------------------------------------

// arriveLocked adds a new entry (a publish or a dead-lettered copy): it is
// offered to consumers, a TTL-0 message no consumer took expires, and a
// drop-head limit evicts from the head.
func (q *Queue) arriveLocked(t *Txn, e *Entry) {
	q.makeReadyLocked(e, true)
	e.arriving = e.zeroTTL
	q.dispatchLocked(t)
	e.arriving = false
	if e.zeroTTL && e.state == stReady {
		q.removeReadyLocked(e)
		q.deadLetterLocked(t, []*Entry{e}, deadletter.Expired, true)
	}
	q.enforceLimitsLocked(t)
}

// insertDeadLetters adds dead-lettered copies whose store puts are already
// written (see txn.finish).
func (q *Queue) insertDeadLetters(es []*Entry) {
	q.mu.Lock()
	t := q.Env.newTxn()
	if q.isDeleted() {
		q.landed(es)
		// The queue went after the copies reached it (in the store):
		// they go with it, like every message it held.
		for _, e := range es {
			q.release(e.BodySize())
			if e.stored {
				t.Batch.DropQueues = []store.QueueID{q.ID}
			}
		}
	} else {
		// The copies stay in flight until all of them are in place: a
		// level may page out only below its lowest seq still to come,
		// or its middle would skip the copies inserted after it.
		for _, e := range es {
			q.makeReadyLocked(e, false)
			q.release(e.BodySize())
			e.arriving = e.zeroTTL
		}
		q.landed(es)
		q.pageOutLocked()
		q.dispatchLocked(t)
		for _, e := range es {
			e.arriving = false
			if e.zeroTTL && e.state == stReady {
				q.removeReadyLocked(e)
				q.deadLetterLocked(t, []*Entry{e}, deadletter.Expired, true)
			}
		}
		q.enforceLimitsLocked(t)
	}
	t.apply(nil)
	q.mu.Unlock()
	t.finish()
}

// enforceLimitsLocked evicts from the head while a drop-head queue is over
// its limits (after a publish, a requeue or a policy change).
func (q *Queue) enforceLimitsLocked(t *Txn) {
	lim := q.Settings().limits
	if !lim.Limited() {
		return
	}
	var evicted []*Entry
	for lim.Over(q.limitLenLocked()) {
		e := q.takeLocked()
		if e == nil {
			break
		}
		e.state = stGone
		evicted = append(evicted, e)
	}
	if len(evicted) > 0 {
		q.Env.Counters.Overflowed.Add(uint64(len(evicted)))
		q.deadLetterLocked(t, evicted, deadletter.MaxLen, true)
	}
}

// --- delivery -----------------------------------------------------------

// dispatchLocked delivers ready entries to consumers with credit, highest
// priority first, round-robin among equals. An entry past its deadline is
// never delivered: it is dead-lettered instead (unless it is arriving now
// with a TTL of 0, which a consumer may still take at once).
func (q *Queue) dispatchLocked(t *Txn) {
	if len(q.consumers) == 0 || q.ready.Len() == 0 {
		return
	}
	if lapsed, _ := q.leaseLapsedLocked(); lapsed {
		return // the broker dispatches again when the lease is regained
	}
	var now int64 // read from the clock once an entry has a deadline
	var expired []*Entry
	for q.ready.Len() > 0 && len(q.consumers) > 0 {
		e := q.ready.Front()
		if e == nil {
			break // the head could not be refilled (the store failed)
		}
		if e.Deadline != 0 && now == 0 {
			now = q.Env.NowMS()
		}
		if e.expiredAt(now) && !e.arriving {
			q.takeLocked()
			e.state = stGone
			expired = append(expired, e)
			continue
		}
		if !q.markReadyLocked(e) {
			q.markWaiting = true // marksWritten dispatches again
			break
		}
		props := q.deliveryProps(e)
		var got *Consumer
		if q.sac {
			// Only the active (longest-registered) consumer receives.
			if c := q.consumers[0]; c.Ch.TryDeliver(c, q, e, props) {
				got = c
			}
		} else {
			for i, c := range q.consumers {
				if c.Ch.TryDeliver(c, q, e, props) {
					got = c
					q.rotateLocked(i)
					break
				}
			}
		}
		if got == nil {
			break
		}
		q.takeLocked()
		q.deliveringLocked(e)
		if got.NoAck {
			e.state = stGone
			t.del(e)
		} else {
			e.state = stUnacked
			q.unacked++
		}
	}
	if len(expired) > 0 {
		q.deadLetterLocked(t, expired, deadletter.Expired, true)
	}
}

// deliveryProps returns the properties to deliver e with: its own, plus
// x-delivery-count on a redelivery from a queue that counts deliveries
// (quorum, or any queue with a delivery limit), and, for an entry returned
// to a queue with delayed retry (AcquiredCount set), x-acquired-count,
// with x-delivery-count only once a return counted as one (RabbitMQ 4.3,
// rabbit_fifo_client:add_delivery_count_header).
func (q *Queue) deliveryProps(e *Entry) []byte {
	raw := e.EffectiveHeader().Props
	dc := e.DeliveryCount > 0 && (e.AcquiredCount > 0 || q.Settings().deliveryLimit >= 0 || q.Type == policy.QueueQuorum)
	if !dc && e.AcquiredCount == 0 {
		return raw
	}
	p, err := amqp.DecodeProperties(raw)
	if err != nil {
		return raw
	}
	if e.AcquiredCount > 0 {
		p.Headers = p.Headers.With("x-acquired-count", int64(e.AcquiredCount))
	}
	if dc {
		p.Headers = p.Headers.With("x-delivery-count", int64(e.DeliveryCount))
	}
	p.Flags |= amqp.FlagHeaders
	out, err := p.Append(nil)
	if err != nil {
		return raw
	}
	return out
}

// rotateLocked moves consumer i behind the others of its priority so the
// next delivery goes to the next one.
func (q *Queue) rotateLocked(i int) {
	c := q.consumers[i]
	j := i
	for j+1 < len(q.consumers) && q.consumers[j+1].Priority == c.Priority {
		q.consumers[j] = q.consumers[j+1]
		j++
	}
	q.consumers[j] = c
}

// locked runs fn with q locked and a txn that is applied before the lock
// is released and finished after.
func (q *Queue) locked(fn func(t *Txn)) {
	q.mu.Lock()
	t := q.Env.newTxn()
	fn(t)
	t.apply(nil)
	q.mu.Unlock()
	t.finish()
}

// Dispatch is dispatchLocked for callers without the lock (credit freed by
// an ack, a consumer added, a connection drained).
func (q *Queue) Dispatch() {
	q.locked(func(t *Txn) {
		if !q.isDeleted() {
			q.dispatchLocked(t)
		}
	})
}

// Get takes the head for basic.get, skipping (and expiring) entries past
// their deadline. It returns nil when the queue is empty, or when its head
// could not be read back from the store.
func (q *Queue) Get(ch Channel, noAck bool) (e *Entry, tag uint64, props []byte, remaining int) {
	for {
		var mark <-chan struct{}
		var fill *FillWait
		e, tag, props, remaining, mark, fill = q.tryGet(ch, noAck)
		switch {
		case mark != nil:
			<-mark // the head's delivered mark is being written, or the lease lapsed
		case fill != nil:
			<-fill.Done // the head is being read back from the store
			if fill.Err != nil {
				return nil, 0, nil, 0
			}
		default:
			return e, tag, props, remaining
		}
	}
}

func (q *Queue) tryGet(ch Channel, noAck bool) (e *Entry, tag uint64, props []byte, remaining int, mark <-chan struct{}, fill *FillWait) {
	q.locked(func(t *Txn) {
		if q.isDeleted() {
			return
		}
		q.touchLocked()
		if lapsed, regained := q.leaseLapsedLocked(); lapsed {
			// The caller waits for the lease, as for a mark write, and
			// asks again; once it has ended the get finds nothing.
			if regained != nil {
				mark = regained
			}
			return
		}
		now := q.Env.NowMS()
		var expired []*Entry
		for {
			f := q.ready.Front()
			if f != nil && !f.expiredAt(now) && !q.markReadyLocked(f) {
				e = nil // an entry expired in an earlier turn is not the one got
				// Stopping, or the store failed: no mark write comes,
				// nothing more is delivered.
				if !q.marksFinal && q.Env.StoreErr.Load() == nil {
					mark = q.markWaitLocked()
				}
				break
			}
			e = q.takeLocked()
			if e == nil || !e.expiredAt(now) {
				break
			}
			e.state = stGone
			expired = append(expired, e)
		}
		q.deadLetterLocked(t, expired, deadletter.Expired, true)
		if e == nil && mark == nil && q.ready.Len() > 0 && !q.marksFinal {
			fill = q.fillWaitLocked() // nil if the store failed
		}
		if e == nil || mark != nil {
			e = nil
			return
		}
		q.deliveringLocked(e)
		props = q.deliveryProps(e)
		tag = ch.RecordGet(q, e, noAck)
		if noAck {
			e.state = stGone
			t.del(e)
		} else {
			e.state = stUnacked
			q.unacked++
		}
		remaining = q.ready.Len()
	})
	return e, tag, props, remaining, mark, fill
}

// AddConsumer subscribes c and calls added under the queue's lock, before
// any delivery to c can be sent; it fails if an exclusive consumer is
// present or c is exclusive and others are.
func (q *Queue) AddConsumer(c *Consumer, added func()) *amqp.Error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.isDeleted() || q.closing {
		return NoQueueError(q.Host.Name, q.Name)
	}
	if q.exclusiveC || (c.Exclusive && len(q.consumers) > 0) {
		return amqp.Errorf(amqp.AccessRefused, "queue '%s' in vhost '%s' in exclusive use", q.Name, q.Host.Name)
	}
	i := len(q.consumers)
	for !q.sac && i > 0 && q.consumers[i-1].Priority < c.Priority {
		i--
	}
	q.consumers = slices.Insert(q.consumers, i, c)
	q.exclusiveC = c.Exclusive
	q.hadConsumer = true
	q.Env.Timers.Remove(&q.lease) // in use while it has consumers
	// Under the lock: no delivery to c can be sent before what added
	// sends (basic.consume-ok, which a client must see first).
	added()
	return nil
}

// ClaimForDelete checks queue.delete's if-unused and if-empty conditions
// and, if they hold, marks the queue closing in the same critical section,
// so no consumer can attach between the check and the delete.
func (q *Queue) ClaimForDelete(ifUnused, ifEmpty bool) *amqp.Error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ifUnused && len(q.consumers) > 0 {
		return amqp.Errorf(amqp.PreconditionFailed, "queue '%s' in vhost '%s' in use", q.Name, q.Host.Name)
	}
	if ifEmpty && q.ready.Len()+q.backlogLen()+len(q.parked) > 0 {
		return amqp.Errorf(amqp.PreconditionFailed, "queue '%s' in vhost '%s' not empty", q.Name, q.Host.Name)
	}
	q.closing = true
	return nil
}

// RemoveConsumer unsubscribes c and reports whether the queue is now an
// auto-delete queue without consumers (and must be deleted).
func (q *Queue) RemoveConsumer(c *Consumer) (autoDelete bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.consumers)
	q.consumers = slices.DeleteFunc(q.consumers, func(x *Consumer) bool { return x == c })
	if len(q.consumers) == n {
		return false
	}
	q.exclusiveC = false
	if len(q.consumers) == 0 {
		q.touchLocked() // the lease starts when the last consumer goes
	}
	return q.AutoDelete && len(q.consumers) == 0 && !q.isDeleted()
}

// Purge drops every ready entry, every dead letter waiting for a route
// (as RabbitMQ 4.3 does for quorum queues, B5) and every entry waiting out
// a retry delay (as RabbitMQ 4.3 purges delayed ones), but not unacked
// ones, and returns how many ready and delayed entries there were
// (purge-ok's message count) and
// the store write of the deletes (purge-ok waits for it). Purged messages
// are not dead-lettered.
func (q *Queue) Purge() (int, *StoreWrite) {
	w := &StoreWrite{Done: make(chan struct{})}
	q.mu.Lock()
	paged, err := q.middleRefsLocked()
	var stored []store.Ref
	if err == nil {
		stored, err = q.backlogRefsLocked()
	}
	if err != nil {
		q.mu.Unlock()
		w.Err = fmt.Errorf("purge queue '%s' in vhost '%s': %w", q.Name, q.Host.Name, err)
		close(w.Done)
		return 0, w
	}
	n := q.ready.Len() + len(q.parked)
	t := q.Env.newTxn()
	for _, e := range q.clearParkedLocked() {
		t.del(e)
	}
	for _, ref := range paged {
		t.Batch.Deletes = append(t.Batch.Deletes, ref)
	}
	es := q.ready.Clear()
	q.dropPagedLocked()
	for _, e := range es {
		e.state = stGone
		if e.Deadline != 0 {
			q.Env.Timers.Remove(&e.timer)
		}
		t.del(e)
	}
	q.syncCounts()
	for _, e := range q.takeBacklogLocked() {
		e.state = stGone
		t.del(e)
	}
	for _, ref := range stored {
		t.Batch.Deletes = append(t.Batch.Deletes, ref)
	}
	q.dropStoredBacklogLocked()
	q.clearBacklogFlagLocked(t)
	t.apply(func(err error) {
		w.Err = err
		close(w.Done)
	})
	q.mu.Unlock()
	t.finish()
	return n, w
}

// markDeletedLocked empties the queue and returns its consumers (to be
// told) and the number of messages it held (ready, and dead letters
// waiting for a route: what delete-ok reports). Its messages are not
// dead-lettered. The caller has written the deletion to the store under
// the same hold of q.mu (see Broker.deleteQueue).
func (q *Queue) markDeletedLocked() (consumers []*Consumer, messages int) {
	q.deleted.Store(true)
	messages = q.ready.Len() + q.backlogLen() + len(q.parked)
	q.clearParkedLocked()
	q.dropPagedLocked()
	for _, e := range q.ready.Clear() {
		e.state = stGone
		if e.Deadline != 0 {
			q.Env.Timers.Remove(&e.timer)
		}
	}
	q.syncCounts()
	q.takeBacklogLocked()
	q.dropStoredBacklogLocked()
	q.Env.Timers.Remove(&q.lease)
	consumers, q.consumers = q.consumers, nil
	return consumers, messages
}

// Lengths are a queue's lengths read at one instant (lengths).
type Lengths struct {
	Ready, Unacked, Backlog, Consumers int
	ReadyBytes                         int64 // the ready messages' bodies
	Resident                           int64 // what the ready list holds in memory

	// Delayed counts the messages waiting out a retry delay (retry.go):
	// messages, but neither ready nor unacknowledged.
	Delayed int
}

// Lengths reads q's lengths under its lock.
func (q *Queue) Lengths() Lengths {
	q.mu.Lock()
	defer q.mu.Unlock()
	return Lengths{Ready: q.ready.Len(), Unacked: q.unacked, Backlog: q.backlogLen(), Consumers: len(q.consumers),
		Delayed: len(q.parked), ReadyBytes: q.ready.Bytes(), Resident: q.ready.Resident()}
}

// MarkClosing has q take no new consumer: it is about to be deleted.
func (q *Queue) MarkClosing() {
	q.mu.Lock()
	q.closing = true
	q.mu.Unlock()
}

func NoQueueError(vhost, name string) *amqp.Error {
	return amqp.Errorf(amqp.NotFound, "no queue '%s' in vhost '%s'", name, vhost)
}

// Delete deletes q. Under q's lock, unlink takes q out of its vhost and
// returns the definition changes to write with the deletion; it reports
// false if q was deleted already, and delete then returns that deletion's
// write. unlock releases what unlink took (the vhost's lock), once the
// deletion's batch — unlink's changes, and the drop of q's store ranges —
// is handed to the store, so the store sees it in the order memory did.
// It returns q's consumers, for the caller to cancel, and how many
// messages q held.
func (q *Queue) Delete(unlink func() ([]store.MetaOp, bool), unlock func()) (consumers []*Consumer, messages int, w *StoreWrite, ok bool) {
	q.mu.Lock()
	meta, ok := unlink()
	if !ok {
		unlock()
		w := q.deletion
		q.mu.Unlock()
		return nil, 0, w, false
	}
	batch := &store.Batch{Meta: meta}
	if q.Durable && !q.Exclusive {
		batch.Meta = append(batch.Meta, store.MetaOp{Key: defs.QueueStateKey(uint64(q.ID))})
		batch.DropQueues = []store.QueueID{q.ID, q.backlogID()}
	}
	if q.spilled {
		batch.DropQueues = append(batch.DropQueues, q.VolatileID())
	}
	if q.blVolatile {
		batch.DropQueues = append(batch.DropQueues, q.volBacklogID())
	}
	q.deletion = q.Env.StartWrite(batch)
	unlock()
	consumers, messages = q.markDeletedLocked()
	w = q.deletion
	q.mu.Unlock()
	q.Env.forgetCycles(q)
	return consumers, messages, w, true
}

// ReadyLen returns the length of q's ready list, and whether q is
// deleted.
func (q *Queue) ReadyLen() (n int, deleted bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ready.Len(), q.isDeleted()
}

// HeadTimestamp returns the timestamp property (seconds) of the message
// that leaves q next, as RabbitMQ's classic queues report it
// (head_message_timestamp): only when that message is resident (RabbitMQ:
// paged in) and has one; ok is false otherwise.
func (q *Queue) HeadTimestamp() (ts uint64, ok bool) {
	q.mu.Lock()
	e, resident := q.ready.ResidentFront()
	var raw []byte
	if resident {
		raw = e.EffectiveHeader().Props
	}
	q.mu.Unlock()
	if !resident {
		return 0, false
	}
	p, err := amqp.DecodeProperties(raw)
	if err != nil || p.Flags&amqp.FlagTimestamp == 0 {
		return 0, false
	}
	return p.Timestamp, true
}
