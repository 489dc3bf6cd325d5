package brokertest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/brokerd/brokerd/store"
)

// SpyStore wraps the store a test broker writes to (Config.WrapStore:
// spy.Wrap): it keeps a copy of every batch applied, runs the hooks the
// test set before applies and reads, and passes everything on to the
// store it wraps. It hides that store's optional interfaces, group commit
// among them (the broker then completes each write on its own); Grouped
// passes group commit through. Set the hooks before the broker starts.
// Safe for concurrent use.
type SpyStore struct {
	store.Store
	// BeforeApply, if set, sees each batch before the store applies it.
	BeforeApply func(*store.Batch)
	// BeforeReadEntries, if set, runs before each ReadEntries; an error
	// it returns is returned in place of the read.
	BeforeReadEntries func() error
	// BeforeLoadMessages, if set, runs before each LoadMessages; an error
	// it returns is returned in place of the read.
	BeforeLoadMessages func() error

	mu      sync.Mutex
	batches []store.Batch
	changed chan struct{} // closed and replaced on every batch
}

// Wrap makes s wrap st and returns s: a Config.WrapStore that records
// across restarts.
func (s *SpyStore) Wrap(st store.Store) store.Store {
	s.Store = st
	return s
}

// Grouped returns s with the wrapped store's group commit (AfterGroup)
// passed through, run at once if the wrapped store has none.
func (s *SpyStore) Grouped() store.Store { return groupedSpy{s} }

type groupedSpy struct{ *SpyStore }

// AfterGroup passes the broker's confirm coalescing through.
func (g groupedSpy) AfterGroup(fn func()) {
	if gc, ok := g.Store.(interface{ AfterGroup(func()) }); ok {
		gc.AfterGroup(fn)
		return
	}
	fn()
}

// Apply implements store.Store.
func (s *SpyStore) Apply(b *store.Batch, done func(error)) {
	if s.BeforeApply != nil {
		s.BeforeApply(b)
	}
	s.mu.Lock()
	s.batches = append(s.batches, b.Clone())
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	s.mu.Unlock()
	s.Store.Apply(b, done)
}

// ReadEntries implements store.Store.
func (s *SpyStore) ReadEntries(q store.QueueID, prio uint8, from uint64, max int, dst []store.EntryMeta) ([]store.EntryMeta, error) {
	if s.BeforeReadEntries != nil {
		if err := s.BeforeReadEntries(); err != nil {
			return dst, err
		}
	}
	return s.Store.ReadEntries(q, prio, from, max, dst)
}

// LoadMessages implements store.Store.
func (s *SpyStore) LoadMessages(ids []store.MsgID, fn func(i int, m *store.Message)) error {
	if s.BeforeLoadMessages != nil {
		if err := s.BeforeLoadMessages(); err != nil {
			return err
		}
	}
	return s.Store.LoadMessages(ids, fn)
}

// Batches returns copies of the batches applied since the start (or the
// last Reset), in Apply order.
func (s *SpyStore) Batches() []store.Batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batches)
}

// Reset forgets the batches applied so far.
func (s *SpyStore) Reset() {
	s.mu.Lock()
	s.batches = nil
	s.mu.Unlock()
}

// Puts returns every entry put so far, in order.
func (s *SpyStore) Puts() []store.Entry {
	var out []store.Entry
	for _, b := range s.Batches() {
		out = append(out, b.Puts...)
	}
	return out
}

// Deletes returns every entry deleted so far, in order.
func (s *SpyStore) Deletes() []store.Ref {
	var out []store.Ref
	for _, b := range s.Batches() {
		out = append(out, b.Deletes...)
	}
	return out
}

// Await waits up to Wait for a batch that satisfies match to be applied
// and returns the position of the first in Batches; it fails the test
// with what if none is.
func (s *SpyStore) Await(t testing.TB, what string, match func(*store.Batch) bool) int {
	t.Helper()
	deadline := time.After(Wait)
	for {
		s.mu.Lock()
		i := slices.IndexFunc(s.batches, func(b store.Batch) bool { return match(&b) })
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		changed := s.changed
		s.mu.Unlock()
		if i >= 0 {
			return i
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no batch applied with %s", what)
		}
	}
}
