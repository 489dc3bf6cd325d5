// Package queue is brokerd's queue engine: a queue and its entries, the
// Txn that turns one operation into one store batch, enqueue, settle and
// dispatch, length limits, paging and spill, TTL and paged expiry,
// delivered marks, dead-letter planning and its backlog, damage, peek and
// the redrive scan, the holding queues of delayed exchanges (scheduled
// delivery: a held message is an entry whose deadline is its due time, and
// is released through its exchange, delayed.go; listed in due-time order
// and cancelled, scheduled.go), delayed retry (a returned message parked
// until its due time, retry.go), and the rules for a
// declaration's queue arguments.
// Its storage side (a level's resident head, stored middle and tail) is
// the engine package below it.
//
// It knows nothing of sockets, channels, connections or the broker. What
// it needs from its owner is one Env (env.go: the store and what reports
// on it, the clock and the timer scheduler, the counters and logs, the
// background tasks, the consumer timeout in force, and two calls back up:
// the store alarm and a queue's expiry), one Host per vhost (its name and
// its Router, through which dead letters and redrives are routed), and a
// Channel per consumer (the one interface through which a delivery leaves
// the engine). The broker package implements those and calls the
// operations here; no code outside this package takes a queue's lock.
//
// # Concurrency
//
// A queue's state is guarded by its own mutex, Queue.mu, and the room that
// dead-lettered copies on their way into it have claimed by Queue.resMu;
// there is no goroutine per queue. Work runs on the goroutine of whoever
// causes it: a publisher's connection reader enqueues and hands the
// message straight to a waiting consumer's Channel; a consumer's reader
// settles and thereby lets the queue deliver the next messages. Timers
// (message deadlines, queue leases) fire on the scheduler's goroutine
// (FireTimers), which takes queue locks like any other caller.
//
// The locks of this package, outermost first, with the owner's locks they
// meet (broker/doc.go has the owner's table):
//
//	lock              guards                       outer                  inner
//	Queue.mu          the queue's state (ready     the owner's authMu     another Queue.mu [1], the
//	                  list, consumers, backlog,    and policyMu; another  Router's read lock [2], a
//	                  marks, paging, lease) and    Queue.mu [1]           Channel's [3], a
//	                  its entries' mutable fields                         RedriveRecorder's, Queue.resMu,
//	                                                                      cycleLog.mu, Env.asyncMu,
//	                                                                      joinEvictions' mu, the
//	                                                                      scheduler's, the store's
//	Queue.resMu       pendN, pendB, inflight       its Queue.mu; a dead   -
//	                                               letter's source's
//	                                               Queue.mu and Router
//	                                               lock [2]
//	joinEvictions'    a publish's count of the     Queue.mu, the Router   -
//	mu (enqueue.go)   evictions it waits for       lock [4]
//	cycleLog.mu       the dead-letter cycle        Queue.mu and the       -
//	                  warnings' pairs              Router lock; authMu
//	Env.asyncMu       asyncClosed, asyncN,         Queue.mu, the Router   - (asyncIdle waits on it)
//	                  asyncIdle                    lock, policyMu; a
//	                                               store completion [4]
//
// [1] An enqueue locks all its target queues, and a commit every queue it
// publishes to or settles in, in id order before touching any
// (lockQueues): the puts, the evictions they cause and the dead-lettered
// copies of those are one store batch, applied with every queue it changes
// locked, so the store sees each entry's put before any later change to
// it; one order for all keeps two publishes with overlapping targets from
// deadlocking. No other code holds two queue locks: dead-lettering puts the
// copies into the source's batch and moves them into their targets'
// memory after the source lock is released (Txn.finish), and settling
// takes its queues one at a time.
//
// [2] Dead letters, and delayed messages at their release (delayed.go),
// are routed with the source's Queue.mu held and the Router's lock taken
// shared (Txn.hold), which is kept until the batch that puts the copies is
// applied: no target can be deleted between
// routing to it and that put, because a deletion (Queue.Delete) takes the
// queue's lock, then the vhost's exclusively, so it also follows every
// change to the queue's entries and every binding to it. Hence the owner
// never takes a queue lock while it holds the vhost's, and the planning
// claims room in each target under the target's resMu, not its Queue.mu.
//
// [3] A Channel's lock is taken under Queue.mu to hand it a delivery
// (TryDeliver, RecordGet), so code holding it never takes a queue's lock:
// the owner takes acknowledged deliveries out of its channel under the
// channel's lock, releases it, then settles them queue by queue
// (SettleRuns).
//
// [4] A store may run a batch's completion inside Apply (memstore does),
// so under every lock Apply's caller holds. Completions therefore take
// only joinEvictions' mu, Env.asyncMu and the owner's leaf locks (a
// confirm's); one that needs a queue lock starts a goroutine
// (writeMarksLocked). The store is read under a Queue.mu only by a purge
// (entry metadata) and while the queue recovers or the broker closes
// (fillLocked).
//
// No goroutine waits while it holds a Queue.mu: a store completion, a
// read of a queue's paged middle and a mark write are waited for with no
// queue lock held.
//
// # Persistence
//
// Only persistent messages in durable queues (every message of a quorum
// queue) reach the store. Each operation is one Batch, built in a Txn: an
// enqueue to several durable queues, with the evictions it causes and
// their dead-lettered copies, is one batch; a settlement, purge or
// dead-lettering of several entries of one queue is one batch. A batch is
// applied with the locks of the queues it changes held, so the store sees
// an entry's put before any later change to it. A transaction (Commit) is
// one batch too: its publishes, its settlements and the dead-lettered
// copies they cause.
//
// After a restart every recovered message is marked redelivered unless
// its level's delivered mark (deliveredmarks.go) shows it was never
// delivered: a false positive is allowed by AMQP, a false negative is not.
//
// # Paging
//
// A queue keeps about two windows of ready entries per priority level in
// memory however deep it is, a window being Config.PageWindow entries or
// Config.PageWindowBytes of messages (bodies and properties: a header can
// outweigh a body), whichever is reached first: a resident head, a middle
// held by the store alone (a seq range and counters) and a resident tail
// of new arrivals (package engine). Entries page out once their put has
// been handed to the store and page back in, bodies included, when the
// head runs low: one window at a time, read outside the queue's lock and
// merged under it (skipping what expired meanwhile) unless the middle was
// emptied or replaced. No read runs under a queue's lock while the broker
// serves: a head that empties before its read completes gives nothing
// until then (deliveries wait, a basic.get waits, and a publish that takes
// a drop-head queue over its limit has its confirm wait for the eviction,
// so a client never sees the queue over its limit). Counters never depend
// on what is resident.
//
// Transient entries (transient messages, every message of a queue that
// does not survive a restart) page out through the queue's volatile store
// range, written a chunk at a time once the tail is past its window and
// dropped at recovery (spill.go); a queue within its window never writes.
// What cannot page out stops paging behind it: a TTL-0 arrival, and
// anything behind a dead-lettered copy still on its way to the queue
// (Queue.newCopyEntry).
//
// Deadlines of paged entries stay in the store's expiry keys; the timer
// wheel holds only those within a short horizon, armed by periodic scans
// of those keys (Env.StartHorizon, pagedexpiry.go); an expired entry
// behind paged ones still being read ahead waits for that read, so dead
// letters leave in queue order. Recovery
// restores a queue from the store's counters (store.Queues) without
// reading its entries. Dead letters waiting for a route (at-least-once)
// wait in store ranges of their own (transient ones in a volatile one),
// retried in chunks (backlog.go); only a queue whose stored definition
// still has the backlog flag of an older layout is read whole at
// recovery.
//
// A page-in read whose store answers that some messages are damaged on
// disk (store.DamageError: a segment block that fails its checksum)
// merges the others and takes those entries out of the queue as a counted
// loss (damage.go), dead-lettered with reason damaged where the entry's
// properties are its own; the store does not fail for it. An expiry read
// leaves such entries to the page-in read.
//
// # Where a new queue feature goes
//
// A limit, a kind of expiry or a dead-letter rule goes in this package's
// files (queue.go, settle.go, dlx.go, backlog.go, expiry.go,
// pagedexpiry.go, paging.go, spill.go, deliveredmarks.go, txn.go, peek.go,
// damage.go, delayed.go, retry.go), its argument in args.go and its policy key in
// broker/policy.
// What it needs from outside goes into Env, Host or Router; what the
// broker needs from it is an exported operation that takes the queue's
// lock itself (Lengths, Purge, Delete, SettleRuns), never the lock taken
// outside.
package queue
