// Package engine is the storage side of brokerd's queue engine: a queue's
// ready entries as a resident head, a stored middle and a resident tail
// per priority level (Ready), the counters that never depend on what is
// resident, and the store reads that page a middle or a dead-letter
// backlog back in (Ranges).
//
// It knows a queue entry only through the Entry interface and the store
// only through store.Store. It takes no locks: its owner (broker.Queue)
// holds the queue's lock around every call to a Ready, and calls the
// Ranges reads without it (to keep disk reads away from publishers; with
// it only while nothing is served), merging the result under the lock if
// the level's Gen and Middle are as they were when the read began, and
// skipping the entries taken out of the middle while it ran (Taken). Nothing here needs a
// socket, a channel or a broker, so the paging rules are tested here
// directly, against a model and against both stores.
package engine
