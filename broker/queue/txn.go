package queue

import (
	"fmt"
	"slices"
	"sync"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/store"
)

// Txn is one store operation under construction. Code that changes queues
// collects its store changes in a txn while it holds the queue locks, calls
// apply before releasing them (so the store sees each queue's changes in
// the order they were made), and calls finish after releasing them.
//
// finish hands dead-lettered copies to their target queues. Their store
// puts are already in the batch, next to the deletes of their sources, so
// a dead-lettered message is in exactly one place in the store at every
// instant; inserting them into the targets' memory after the source locks
// are gone means no code ever holds two queue locks it did not take in id
// order.
type Txn struct {
	env     *Env
	Batch   store.Batch
	dropped int                     // puts tombstoned by del (Msg set to nil)
	putAt   map[store.Ref]int       // index of batch.Puts, built once it is large
	listed  map[*store.Message]bool // set of batch.Messages, likewise
	inserts []*Entry                // dead-lettered copies for target queues
	puts    []*Entry                // the entries of batch.Puts (inStore is set on write)
	held    Router                  // read-locked until apply (hold)
}

// txnPool recycles txns and their slices: a store does not keep a batch
// after Apply returns (store.Store), so every txn is reused once finished.
var txnPool = sync.Pool{New: func() any { return new(Txn) }}

// hold read-locks r until apply: dead letters routed under it must
// reach the store before any queue they were routed to can be deleted
// (deletion takes the vhost lock exclusively first).
func (t *Txn) hold(r Router) {
	if t.held == nil {
		r.RLock()
		t.held = r
	}
}

func (b *Env) newTxn() *Txn {
	t := txnPool.Get().(*Txn)
	t.env = b
	return t
}

// maxPooledBatch is the most puts, deletes or updates a txn may have held
// and still go back to txnPool: a large transaction's slices are left to
// the garbage collector rather than pinned by the pool.
const maxPooledBatch = 1024

// recycle returns t to txnPool once its owner is done with it (finish).
func (t *Txn) recycle() {
	b := &t.Batch
	if t.held != nil || max(cap(b.Puts), cap(b.Deletes), cap(b.Updates), cap(b.Messages)) > maxPooledBatch {
		return
	}
	clear(b.Messages)
	clear(b.Puts)
	clear(b.Updates)
	clear(t.puts)
	*t = Txn{Batch: store.Batch{
		Messages: b.Messages[:0], Puts: b.Puts[:0], Updates: b.Updates[:0], Deletes: b.Deletes[:0],
	}, puts: t.puts[:0], inserts: t.inserts[:0]}
	txnPool.Put(t)
}

// smallBatch is the size up to which a txn scans its puts instead of
// indexing them: most operations put one to a few entries, and a map per
// publish would cost more than the scan.
const smallBatch = 16

// put writes a new stored entry.
func (t *Txn) put(e *Entry) {
	t.Batch.Puts = append(t.Batch.Puts, e.Entry)
	t.puts = append(t.puts, e)
	if t.putAt != nil {
		t.putAt[e.Ref] = len(t.Batch.Puts) - 1
	} else if len(t.Batch.Puts) > smallBatch {
		t.putAt = make(map[store.Ref]int, 2*len(t.Batch.Puts))
		for i, p := range t.Batch.Puts {
			if p.Msg != nil {
				t.putAt[p.Ref] = i
			}
		}
	}
	switch {
	case t.listed != nil:
		if t.listed[e.Msg] {
			return
		}
		t.listed[e.Msg] = true
	case slices.Contains(t.Batch.Messages, e.Msg):
		return
	case len(t.Batch.Messages) >= smallBatch:
		t.listed = make(map[*store.Message]bool, 2*len(t.Batch.Messages))
		for _, m := range t.Batch.Messages {
			t.listed[m] = true
		}
		t.listed[e.Msg] = true
	}
	t.Batch.Messages = append(t.Batch.Messages, e.Msg)
}

// putIndex returns the index in batch.Puts of the live put of ref, or -1.
func (t *Txn) putIndex(ref store.Ref) int {
	if t.putAt != nil {
		if i, ok := t.putAt[ref]; ok {
			return i
		}
		return -1
	}
	for i := range t.Batch.Puts {
		if p := &t.Batch.Puts[i]; p.Ref == ref && p.Msg != nil {
			return i
		}
	}
	return -1
}

// del removes a stored entry. An entry put by this same txn (a message
// delivered without ack, or dead-lettered, before its put was written) is
// simply not put.
func (t *Txn) del(e *Entry) {
	if !e.stored {
		return
	}
	if i := t.putIndex(e.Ref); i >= 0 {
		t.Batch.Puts[i].Msg = nil // tombstone, compacted in apply
		t.dropped++
		if t.putAt != nil {
			delete(t.putAt, e.Ref)
		}
		return
	}
	t.Batch.Deletes = append(t.Batch.Deletes, e.Ref)
}

// update writes a stored entry's mutable fields.
func (t *Txn) update(e *Entry) {
	if !e.stored {
		return
	}
	if i := t.putIndex(e.Ref); i >= 0 {
		p := &t.Batch.Puts[i]
		p.DeliveryCount, p.AcquiredCount, p.ReadyAt = e.DeliveryCount, e.AcquiredCount, e.ReadyAt
		p.DeadLetter, p.DeadAt = e.DeadLetter, e.DeadAt
		return
	}
	t.Batch.Updates = append(t.Batch.Updates, store.Update{Ref: e.Ref, DeliveryCount: e.DeliveryCount,
		AcquiredCount: e.AcquiredCount, ReadyAt: e.ReadyAt, DeadLetter: e.DeadLetter, DeadAt: e.DeadAt})
}

// apply writes the batch (if it changes anything) and calls done when it
// is durable; done(nil) at once for an empty batch. Call it with the locks
// of the queues whose entries changed still held.
func (t *Txn) apply(done func(error)) {
	if !t.write(done) && done != nil {
		done(nil)
	}
}

// write is apply for callers that must tell a store completion from an
// empty batch (publisher confirms: see groupCompleter). It hands the batch
// to the store, unless it changes nothing, and reports whether it did;
// only then does done (may be nil) run, as the store's completion. The
// Router lock taken by hold is released either way.
func (t *Txn) write(done func(error)) bool {
	if t.held != nil {
		defer func() {
			t.held.RUnlock()
			t.held = nil
		}()
	}
	if t.dropped > 0 {
		puts := t.Batch.Puts[:0]
		for _, p := range t.Batch.Puts {
			if p.Msg != nil {
				puts = append(puts, p)
			}
		}
		t.Batch.Puts = puts
	}
	// Messages alone change nothing: they are stored only for the puts
	// that refer to them.
	if len(t.Batch.Puts) == 0 && len(t.Batch.Updates) == 0 && len(t.Batch.Deletes) == 0 &&
		len(t.Batch.DropQueues) == 0 && len(t.Batch.Meta) == 0 {
		return false
	}
	b := t.env
	if done == nil {
		b.Store.Apply(&t.Batch, b.storeFailedFn)
	} else {
		b.Store.Apply(&t.Batch, func(err error) {
			b.storeFailed(err)
			done(err)
		})
	}
	// A read of the store finds these entries now: they may page out.
	for _, e := range t.puts {
		e.inStore = true
	}
	return true
}

// finish inserts dead-lettered copies into their target queues. Call it
// with no queue lock held, last: t may be reused after it.
func (t *Txn) finish() {
	defer t.recycle()
	for len(t.inserts) > 0 {
		// Group by target, keeping order, so each target is locked once.
		q := t.inserts[0].q
		var mine []*Entry
		rest := t.inserts[:0:0]
		for _, e := range t.inserts {
			if e.q == q {
				mine = append(mine, e)
			} else {
				rest = append(rest, e)
			}
		}
		t.inserts = rest
		q.insertDeadLetters(mine)
	}
}

// ownMessage returns a copy of m with an id of its own (the body is shared
// in memory): what goes where m's stored body may not be (spill.go's
// comment, planDeadLetterLocked).
func (b *Env) ownMessage(m *store.Message) *store.Message {
	return &store.Message{ID: b.Store.AllocMsgID(), Header: m.Header, Body: m.Body, Persistent: m.Persistent}
}

// StoreWrite is a batch handed to the store, whose completion is awaited
// later. A nil *storeWrite is a write of nothing, complete at once.
type StoreWrite struct {
	Done chan struct{}
	Err  error // set before done is closed
}

// WaitErr is wait for management operations: the store's error, wrapped.
func (w *StoreWrite) WaitErr() error {
	if w == nil {
		return nil
	}
	<-w.Done
	if w.Err != nil {
		return fmt.Errorf("store failed: %w", w.Err)
	}
	return nil
}

// Wait blocks until the write is durable. A failure is a connection error
// (541): the reply that depends on it (declare-ok, delete-ok, ...) promises
// the change survives a restart.
func (w *StoreWrite) Wait() *amqp.Error {
	if w == nil {
		return nil
	}
	<-w.Done
	if w.Err != nil {
		return amqp.Errorf(amqp.InternalError, "message store failed: %s", w.Err)
	}
	return nil
}

// StartWrite hands batch to the store and returns at once (Apply does not
// block). Definition changes call it with the lock under which they
// changed memory still held (the vhost lock; the queue lock too for a
// queue's deletion), so the store sees them in the order memory did;
// they wait after releasing it.
func (b *Env) StartWrite(batch *store.Batch) *StoreWrite {
	if batch.Empty() {
		return nil
	}
	w := &StoreWrite{Done: make(chan struct{})}
	b.Store.Apply(batch, func(err error) {
		b.storeFailed(err)
		w.Err = err
		close(w.Done)
	})
	return w
}
