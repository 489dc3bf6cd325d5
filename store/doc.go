// Package store defines the message store: the persistence boundary of brokerd.
//
// The broker keeps a queue's live state (ready entries, consumers, unacked
// deliveries) in memory; the store is where the part of that state that must
// survive a restart is written: durable definitions (vhosts, exchanges,
// queues, bindings, policies, users) and the entries of persistent messages
// in durable queues. Transient messages and non-durable queues reach it only
// to bound memory, in volatile queues that never outlive a restart
// (VolatileQueue).
//
// Everything the broker changes is expressed as one Batch applied with
// Apply. A Batch is atomic: after a crash at any instant either all of it is
// visible on reopen or none of it is. This is what makes dead-lettering safe:
// the source entry's delete and the target entries' puts travel in one Batch,
// so a dead-lettered message is in exactly one place (DESIGN.md).
//
// # Model
//
//   - A Message is an immutable body plus its publish-time header (exchange,
//     routing keys, raw AMQP content-header properties). It has a MsgID and
//     is shared by every entry that refers to it: a message routed to three
//     queues, or dead-lettered to two, is stored once. The store deletes a
//     message when its last entry goes (reference counting).
//   - An Entry is a message's place in one queue: (QueueID, Prio, Seq).
//     Prio is the queue's priority level the entry is in (0 without
//     priorities); a store keeps each level's entries apart so a level can
//     be read on its own. Seq is assigned by the queue, unique within the
//     queue across its levels, and only grows: never reused, also after
//     every entry was deleted and across restarts (LastSeq gives the
//     highest ever put, from which the broker continues). Within a level
//     entries are ordered by Seq. An entry may carry its own Header
//     (dead-lettering rewrites exchange, routing keys and properties
//     without copying the body), a Deadline (unix milliseconds; 0 = none),
//     a DeliveryCount, an AcquiredCount and a ReadyAt (a delayed retry's
//     due time: the counts and the time are the broker's to give meaning,
//     the store only keeps them) and an Origin: the broker's own record of
//     the queue a dead-lettered copy came from, which x-death (a header
//     any publisher can write) is not.
//   - Meta is a small ordered key/value space for definitions, written in
//     the same Batch mechanism so that, e.g., deleting a queue and all its
//     entries is one atomic step. Keys and values are arbitrary bytes (the
//     broker's record layout is in broker/defs).
//
// # Ordering
//
// Apply does not block on I/O, so the broker calls it while holding the
// locks that ordered a change in memory; the store applies batches in the
// order their Apply calls were made, and a restart recovers that order.
//
// # Reads
//
// Reads serve recovery and paging, never the publish/ack hot path. A paging
// queue keeps a window of each priority level resident and reads the rest
// on demand, so the reads it uses load only what they are asked for, and
// their cost is bounded by the answer, not by the number of stored
// messages:
//
//   - Queues lists every queue with its QueueState: LastSeq and, per
//     non-empty priority level, the entry count and the sum of body sizes.
//     Stores keep these counters on every Apply (a put adds its body size,
//     a delete subtracts it, an update changes nothing, DropQueues forgets
//     the queue) and never compute them by scanning entries. Recovery
//     starts from it: O(queues) for the memory store; O(queues + overlay
//     size) for the disk store (its index holds the state as of the last
//     checkpoint, the overlays the changes since; see package diskstore).
//   - ReadEntries reads one level's entries from a seq, at most max, as
//     EntryMeta: metadata only (body size included), no body read. Cost:
//     O(log + max + the level's deleted entries it steps over) in the
//     memory store; in the disk store one index range scan
//     (index.LevelBounds) starting at the seq, merged with the overlays'
//     changes to the level: O(max + the level's overlay deletes and
//     updates at or after the seq), whatever the level's depth. The
//     window after it starts at its last Seq + 1.
//   - ReadRefs reads named entries, as ReadEntries does, one point lookup
//     each (the disk store: the overlays, then one snapshot iterator in
//     key order): what a paging queue's expiries read.
//   - DeadlineRefs lists (deadline, ref) of entries whose deadline is in
//     a range, in deadline order, reading no entry: the disk store reads
//     its expiry keys and its overlays' puts. It may list an entry deleted
//     since the last checkpoint. A paging broker arms timers from it for
//     the deadlines of a near horizon.
//   - LoadMessages reads the bodies of messages named by id, each once
//     however many entries (or ids) name it; the disk store reads what
//     its overlays do not hold from segments in one batched read, their
//     message records through one forward-seeking iterator.
//   - LastSeq reads one queue's LastSeq.
//
// Each read sees one consistent state: the effect of every Apply that
// returned before the read began and none of one that began after it
// returned (a read concurrent with an Apply may or may not see it).
//
// ScanQueue (every entry of a queue from a seq, bodies included) loads
// whole entries and is O(stored entries of the queue); it remains for
// recovery of a queue that cannot page (a legacy dead-letter backlog
// flag), and is not for paging. Both implementations also have
// ScanDeadlines (whole entries in deadline order up to a time, O(stored
// entries)): no broker code reads it, so it is not part of Store; the
// conformance suite checks it (storetest.DeadlineScanner).
//
// # Durability completion
//
// Apply's done callback runs once the batch is durable according to the
// store's sync policy (for the disk store: after the fsync that covers it).
// The broker sends a publisher confirm only from that callback. The callback
// may run on a store goroutine; it must not block.
//
// Implementations: diskstore (durable: a WAL with group commit, compressed
// segments and a Pebble index; brokerd's default) and memstore (in memory;
// nothing survives the process; for tests, storage.engine = "memory", and
// the reference diskstore's model test compares against). Both run the
// conformance suite in storetest.
package store
