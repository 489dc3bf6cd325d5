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
//	Broker.mu → VHost.mu → Queue.mu (several only in id order, by enqueue)
//	         → channel.mu → confirmTracker.mu → the connection's write lock
//
// A goroutine may take a later lock while holding an earlier one, never the
// reverse. In particular code holding channel.mu never takes a queue lock:
// ack processing first takes the deliveries out of the channel under its
// lock, releases it, then settles them queue by queue.
//
// # Persistence
//
// Only persistent messages in durable queues, and durable definitions,
// reach the store (store.Store). Their entries are written in one Batch per
// operation: a publish to several durable queues is one batch; an ack,
// requeue or purge of several entries of one queue is one batch. The batch
// for an entry is always applied under the queue's lock, so the store sees
// an entry's put before its delete. Publisher confirms are sent from the
// batch's completion.
//
// After a restart every recovered message is marked redelivered, because
// any of them may have been delivered before: a false positive is allowed
// by AMQP, a false negative is not.
package broker
