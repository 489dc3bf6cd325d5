// Package broker implements the AMQP 0-9-1 model on top of a message store,
// and is brokerd's composition root (Open, Close). It holds vhosts,
// exchanges, bindings and routing; queues with their paging, TTLs and
// expiry, delivered marks, dead-lettering and its backlog, peek and
// redrive; consumers, deliveries, acknowledgements, publisher confirms,
// transactions and direct reply-to; users, permissions, policies and
// operator policies, and the definitions that persist them (their import
// included); redrive tasks, resource alarms, consumer timeouts, and the
// counters and views the management API reads (Direct runs management
// methods through a client's channel code). The amqp package calls it
// through amqp.Handler, amqp.Session and amqp.ChannelHandler; mgmt, metrics
// and cmd/brokerd through its exported methods. It builds on store, ttl,
// overflow, deadletter, amqp and its engine package.
//
// # Concurrency model
//
// A queue's state is guarded by its own mutex, Queue.mu, and the room that
// dead-lettered copies on their way into it have claimed by Queue.resMu;
// there is no goroutine per queue. Work runs on the goroutine of whoever
// causes it: a publisher's connection reader routes and enqueues, and
// hands the message straight to a waiting consumer's connection (whose
// writer goroutine sends it); a consumer's reader acks and thereby lets
// the queue deliver the next messages. This keeps a message's path free
// of goroutine hand-offs. Timers (message deadlines, queue leases) fire on
// the scheduler's goroutine, which takes queue locks like any other
// caller.
//
// # Locks
//
// The table lists every mutex the package takes, and the other packages'
// mutexes it takes under its own, outermost first. Code that holds a lock
// takes only locks further down, never one further up, and a second lock
// of the same row only as the row's note says. Outer are the locks that
// may be held when it is taken, inner those taken while it is held ("-":
// none). The fields a lock guards are grouped under it in its struct.
//
//	lock                   guards                      outer                inner
//	Broker.authMu          user, vhost and permission  -                    VHost.policyMu, Broker.mu,
//	                       changes and definitions                          Broker.idMu, Queue.mu, VHost.mu,
//	                       imports, from the change                         conn.mu, cycleLog.mu, the
//	                       in memory to the store's                         scheduler's, the connection's,
//	                       completion [3]                                   the store's
//	VHost.policyMu         a vhost's policy changes,   authMu; another      VHost.mu, Queue.mu, Broker.mu,
//	                       from the change to its      vhost's policyMu     Broker.idMu, and what Queue.mu
//	                       application to the queues   [1]                  takes [4]
//	Broker.mu (RW)         vhosts, users, perms,       authMu, policyMu,    the store's
//	                       conns, closed, alarms and   the login limiter's
//	                       every VHost.meta
//	Queue.mu               the queue's state (ready    authMu, policyMu;    another Queue.mu [2], VHost.mu
//	                       list, consumers, backlog,   another Queue.mu     [6], redriveTask.mu, channel.mu
//	                       marks, paging, lease) and   [2]                  [7], Queue.resMu, cycleLog.mu,
//	                       its entries' mutable                             env.asyncMu, confirmTracker.mu
//	                       fields                                           and joinEvictions' [5],
//	                                                                        directOut.mu, the scheduler's,
//	                                                                        the connection's, the store's
//	VHost.mu (RW)          exchanges, queues,          Queue.mu [6],        shared (under Queue.mu): the
//	                       policies, opPolicies, the   policyMu, authMu;    locks below it that Queue.mu
//	                       bindings of its exchanges   another VHost.mu     takes; exclusive: Broker.idMu,
//	                       and queues, exchanges'      [1]                  another VHost.mu [1], the
//	                       policyAE                                         store's
//	Broker.idMu            the durable queue id mark   authMu, policyMu,    the store's
//	                       (written in id order)       VHost.mu
//	redriveTask.mu         a redrive task's state,     Queue.mu and         the store's
//	                       counters and source         VHost.mu (a move)
//	channel.mu             the channel's state         Queue.mu [7] (and    confirmTracker.mu, the
//	                       (unacked, consumers, tags,  VHost.mu)            connection's, directOut.mu
//	                       modes, put-off acks) and
//	                       its consumers' unacked
//	joinEvictions' mu      a publish's count of the    Queue.mu, VHost.mu   -
//	(publish.go)           evictions it waits for      [5]
//	confirmTracker.mu      the confirm ring and its    channel.mu,          the connection's, directOut.mu
//	                       watermark                   Queue.mu, VHost.mu
//	                                                   [5]
//	Queue.resMu            pendN, pendB, inflight      its Queue.mu; a      -
//	                                                   dead letter's
//	                                                   source's Queue.mu
//	                                                   and VHost.mu [6]
//	cycleLog.mu            the dead-letter cycle       Queue.mu and         -
//	                       warnings' pairs             VHost.mu; authMu
//	env.asyncMu            asyncClosed, asyncN,        Queue.mu, VHost.mu,  - (asyncIdle waits on it)
//	                       asyncIdle                   policyMu; a store
//	                                                   completion [5]
//	conn.mu                channels, exclusive         authMu               -
//	redrives.mu            the set of redrive tasks    -                    -
//	directOut.mu           a Direct's replies          channel.mu,          -
//	                                                   Queue.mu,
//	                                                   confirmTracker.mu
//	ttl.Scheduler's        its timer wheel             Queue.mu (and what   - (fire runs without it)
//	                                                   is outside it)
//	amqp.ServerConn's      its outbound queue (wmu)    authMu, Queue.mu,    - (its writer runs Later and
//	wmu and cmu,           and close state (cmu):      VHost.mu,            Drained without them)
//	"the connection's"     Send, Later, Writable,      channel.mu,
//	                       Close, Blocked              confirmTracker.mu
//	ratelog.Limiter's      a rate-limited warning      Queue.mu, VHost.mu   -
//	the store's            (store.Store): Apply, and   authMu, policyMu,    - [5]
//	                       reads under Queue.mu [5]    Broker.mu, Queue.mu,
//	                                                   VHost.mu, idMu,
//	                                                   redriveTask.mu
//
// [1] Locks of several vhosts are held together only by a definitions
// import (importdefs.go), which holds authMu and so runs alone: the
// policyMu of every existing vhost it changes, then their mu, each in name
// order; then, with those policyMu still held, each new vhost's policyMu
// in turn to apply its policies (importPlan.finish). Other code takes one
// vhost's locks.
//
// [2] A publish locks all its target queues, and tx.commit every queue it
// publishes to or settles in, in id order before touching any
// (lockQueues): the puts, the evictions they cause and the dead-lettered
// copies of those are one store batch, applied with every queue it changes
// locked, so the store sees each entry's put before any later change to
// it; one order for all keeps two publishes with overlapping targets from
// deadlocking. No other code holds two queue locks: dead-lettering puts the
// copies into the source's batch and moves them into their targets'
// memory after the source lock is released (txn.finish), and settling
// takes its queues one at a time.
//
// [3] authMu is outermost and connection code never takes it, so it is
// held across waits: for the store's completion (a change the store
// refuses is undone) and, in DeleteVHost, for the vhost's connections to
// end before its queues are locked and deleted (deleteVHostContents). An
// import holds it while it takes queue locks too (applyPolicies, the new
// queues' leases), and DeleteUser while it closes connections.
//
// [4] policyMu is held while a policy change waits for the store and is
// then applied to each queue under the queue's lock (applyPolicies,
// Queue.setConfig), which may evict for a new limit and retries waiting
// dead letters. No code holding a queue or vhost lock takes it.
//
// [5] A store may run a batch's completion inside Apply (memstore does), so
// under every lock Apply's caller holds. Completions therefore take only
// confirmTracker.mu, joinEvictions' mu, env.asyncMu and the
// connection's locks or a Direct's (a confirm, tx.commit-ok, a connection
// error); one that needs a queue lock starts a goroutine
// (writeMarksLocked). The store's own locks are leaves: Apply takes them
// under the locks here, and completions run without them. The store is
// read under a Queue.mu only by a purge (entry metadata) and while the
// queue recovers or the broker closes (fillLocked).
//
// [6] Dead letters are routed with the source's Queue.mu held and VHost.mu
// taken shared (txn.holdVHost), which is kept until the batch that puts
// the copies is applied: no target can be deleted between routing to it
// and that put, because deleting a queue takes its Queue.mu, then
// VHost.mu exclusively (deleteQueueFor), so the deletion also follows
// every change to the queue's entries and every binding to it. Hence no
// code takes a queue lock while it holds VHost.mu: declarations change the
// maps under VHost.mu and work on queues after releasing it, and the
// planning claims room in each target under the target's resMu, not its
// Queue.mu. Broker.mu and VHost.mu are never held together.
//
// [7] channel.mu is taken under Queue.mu to hand the channel a delivery
// (tryDeliver, recordGet), so code holding channel.mu never takes a queue
// or vhost lock: an ack takes the deliveries out of the channel under its
// lock, releases it, then settles them queue by queue.
//
// No goroutine waits while it holds a Queue.mu, VHost.mu, Broker.mu or
// channel.mu: a store completion, a read of a queue's paged middle, a mark
// write, an alarm and Store.Reserve are waited for with none of them held.
//
// # Persistence
//
// Only persistent messages in durable queues, and durable definitions,
// reach the store (store.Store). Each operation is one Batch (built in a
// txn): a publish to several durable queues, with the evictions it causes
// and their dead-lettered copies, is one batch; an ack, requeue, purge or
// dead-lettering of several entries of one queue is one batch. A batch is
// applied with the locks of the queues it changes held, so the store sees
// an entry's put before any later change to it. Publisher confirms are
// sent from the batch's completion.
//
// Backpressure from the store is taken before any lock: a publish calls
// Store.Reserve (which waits while the store's log queue or un-checkpointed
// state is past its bound) where it waits for alarms, so Apply, called
// under queue locks, never blocks.
//
// # Paging
//
// A queue keeps about two windows of ready entries per priority level in
// memory however deep it is, a window being Options.PageWindow entries or
// Options.PageWindowBytes of messages (bodies and properties: a header can
// outweigh a body), whichever is reached first: a resident
// head, a middle held by the store alone (a seq range and counters) and a
// resident tail of new arrivals (package engine). Entries page out once
// their put has been handed to the store and page back in, bodies
// included, when the head runs low: one window at a time, read outside
// the queue's lock and merged under it (skipping what expired meanwhile)
// unless the middle was emptied or replaced. No read runs under a queue's
// lock while the broker serves: a head that empties before its read
// completes gives nothing until then (deliveries wait, a basic.get waits,
// and a publish that takes a drop-head queue over its limit has its
// confirm wait for the eviction, so a client never sees the queue over
// its limit). Counters never depend on what is resident. Transient entries (transient messages, every message of a
// queue that does not survive a restart) page out through the queue's
// volatile store range, written a chunk at a time once the tail is past
// its window and dropped at recovery (spill.go); a queue within its window
// never writes. What cannot page out stops paging behind it: a TTL-0
// arrival, and anything behind a dead-lettered copy still on its way to
// the queue (Queue.newCopyEntry).
// Deadlines of paged entries stay in the store's expiry keys; the timer
// wheel holds only those within a short horizon, armed by periodic scans
// of those keys (pagedexpiry.go). Recovery restores a queue from the store's
// counters (store.Queues) without reading its entries. Dead letters
// waiting for a route (at-least-once) wait in store ranges of their own
// (transient ones in a volatile one), retried in chunks (backlog.go);
// only a queue whose stored definition still has the backlog flag of an
// older layout is read whole at recovery.
//
// A page-in read whose store answers that some messages are damaged on
// disk (store.DamageError: a segment block that fails its checksum)
// merges the others and takes those entries out of the queue as a counted
// loss (damage.go), dead-lettered with reason damaged where the entry's
// properties are its own; the store does not fail for it. An expiry read
// leaves such entries to the page-in read.
//
// Definitions follow the same rule: the store receives changes in the
// order memory made them. A declaration, deletion, binding, unbinding,
// policy, vhost, user or permission change calls Apply while it still
// holds the lock under which it changed memory (VHost.mu; Broker.mu for
// vhosts, users and permissions; for a queue's
// deletion its Queue.mu and then VHost.mu, so the deletion follows every
// change to the queue's entries and every binding to it), and waits for
// the completion only after releasing it. Apply never blocks on I/O, so
// calling it under these locks is cheap. A binding therefore never reaches
// the store after the deletion of its queue, and a queue's entries never
// before its definition.
//
// A reply that promises a durable change is sent only once the store has
// made it durable: declare-ok, bind-ok and unbind-ok, delete-ok and
// purge-ok (for queues and exchanges). If the store fails, the reply is a
// connection error 541 INTERNAL_ERROR instead.
//
// Recovery drops (with a warning, deleting the record) a definition that
// refers to something absent: a binding to or from an unknown queue or
// exchange, a queue, exchange or policy in an unknown vhost. A record that
// does not decode stops the broker from opening.
//
// A transaction is one store operation. tx.commit routes its publishes
// first, then locks every queue the transaction touches — the publishes'
// targets and the queues of the deliveries it acks, rejects or requeues —
// in id order, as a publish locks its targets; the publishes, the
// settlements and the dead-lettered copies they cause are built into one
// batch and applied under those locks, and tx.commit-ok is sent from that
// batch's completion (a store failure closes the connection with 541
// instead). The reader carries on with the connection's other channels
// meanwhile; a later method on the committing channel waits for the
// completion, so no reply overtakes commit-ok.
//
// Publisher confirms are sent in tag order from a per-channel watermark
// (confirm.go): a completion only records ack or nack; consecutive acks go
// out as one basic.ack{multiple=true}, each nack on its own, and nothing
// past a publish that is still pending. With a store that completes in
// groups (the disk store's group commit, through AfterGroup), the flush
// is handed over once after the group, so each channel gets one ack frame
// per fsync. The connection's writer goroutine formats the frames, not the
// store's.
//
// After a restart every recovered message is marked redelivered, because
// any of them may have been delivered before: a false positive is allowed
// by AMQP, a false negative is not.
//
// # Where things go
//
// The package is being split (issue 24): the pure parts are packages of
// their own already, and the queue engine's files reach the broker only
// through env (env.go) and consumerChannel, the seams its own package
// will export. Until it moves:
//
//   - A new queue feature (a limit, a kind of expiry, a dead-letter rule)
//     goes in the engine's files (queue.go, settle.go, dlx.go, backlog.go,
//     expiry.go, pagedexpiry.go, paging.go, spill.go, deliveredmarks.go,
//     txn.go, peek.go, damage.go). What it needs from outside the queue
//     goes into env, never through q.vhost.b; what the rest of broker
//     needs from it is a Queue method that takes the queue's lock itself
//     (lengths, markClosing), not q.mu taken outside. Its argument or
//     policy key goes in args.go and broker/policy's key table.
//   - A new AMQP method goes in methods.go (the dispatch) with its
//     channel-side work in channel.go, declare.go or publish.go; it is
//     validated with RabbitMQ's codes and texts (errors.go).
//   - A new durable definition type gets its record in broker/defs (key
//     prefix, value struct, encode and decode mirrored, a golden and a
//     fuzzer), a def() builder beside the live type (definitions.go), its
//     recovery in recoverDefinitions and its import and export in
//     importdefs.go.
//   - Pure rules (validation, matching, hashing) go in broker/policy or
//     broker/auth, with table tests; management-facing errors in
//     broker/base.
package broker
