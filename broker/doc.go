// Package broker implements the AMQP 0-9-1 model on top of a message store:
// vhosts, exchanges and bindings, routing, queues, consumers, deliveries,
// acknowledgements, publisher confirms, transactions and direct reply-to.
// It is the only package that knows all the others; the amqp package calls
// it through amqp.Handler, amqp.Session and amqp.ChannelHandler.
//
// # Concurrency model
//
// Each queue is guarded by one mutex (Queue.mu); there is no goroutine per
// queue. Work runs on the goroutine of whoever causes it: a publisher's
// connection reader routes and enqueues, and hands the message straight to
// a waiting consumer's connection (whose writer goroutine sends it); a
// consumer's reader acks and thereby lets the queue deliver the next
// messages. This keeps a message's path free of goroutine hand-offs.
//
// Lock order, outermost first:
//
//	Queue.mu (several only in id order, taken together by a publish or a tx.commit)
//	  → VHost.mu (shared: dead letters are routed with the source locked;
//	    exclusive: a queue is deleted with its own lock held)
//	  → channel.mu → confirmTracker.mu → the connection's write lock
//	  → the expiry scheduler's lock (innermost: it never calls out)
//
// Broker.mu is taken alone, or inside Broker.authMu, which serializes
// user, vhost and permission changes from memory to the store's
// completion (it is held while a deleted vhost's connections end and its
// contents go, so it is never taken by connection code). A goroutine may take a later lock while holding
// an earlier one, never the reverse: no code takes a queue lock while it
// holds a vhost lock (declarations change maps under VHost.mu, then work on
// queues after releasing it), and code holding channel.mu never takes a
// queue lock (ack processing takes the deliveries out of the channel under
// its lock, releases it, then settles them queue by queue).
//
// Two vhosts' locks are held together only by a definitions import
// (importdefs.go), under Broker.authMu: every policyMu, then every mu, in
// name order; no other code holds two.
//
// Two queue locks are never taken one inside the other except by publish,
// in id order. Dead-lettering moves a message from one queue to others
// without that: under the source's lock it writes the source delete and
// the target puts in one store batch (txn) and assigns the targets'
// sequence numbers atomically; the copies enter the targets' memory after
// the source lock is released (txn.finish).
//
// Timers (message deadlines, queue leases) fire on the scheduler's
// goroutine, which takes queue locks like any other caller.
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
// of those keys (horizon.go). Recovery restores a queue from the store's
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
package broker
