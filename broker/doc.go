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
//	Queue.mu (several only in id order, taken together by a publish)
//	  → VHost.mu (shared: dead letters are routed with the source locked)
//	  → channel.mu → confirmTracker.mu → the connection's write lock
//	  → the expiry scheduler's lock (innermost: it never calls out)
//
// Broker.mu is taken alone. A goroutine may take a later lock while holding
// an earlier one, never the reverse: no code takes a queue lock while it
// holds a vhost lock (declarations change maps under VHost.mu, then work on
// queues after releasing it), and code holding channel.mu never takes a
// queue lock (ack processing takes the deliveries out of the channel under
// its lock, releases it, then settles them queue by queue).
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
// After a restart every recovered message is marked redelivered, because
// any of them may have been delivered before: a false positive is allowed
// by AMQP, a false negative is not.
package broker
