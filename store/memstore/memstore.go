// Package memstore is the in-memory implementation of store.Store.
//
// It keeps everything in maps under one mutex; each Batch is validated and
// then applied under that lock, so batches are atomic with respect to every
// reader. Each queue also keeps its priority levels' seqs in order with
// their counters (queue.go), so the paging reads (Queues, ReadEntries) do
// not walk whole queues. Nothing survives the process. Reopen simulates a restart: it
// returns a new store holding the same durable data, which is what a disk
// store would recover — the storetest conformance suite uses it to run its
// restart cases against both implementations.
package memstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/brokerd/brokerd/store"
)

type msgRec struct {
	msg  *store.Message
	refs int
}

// Store is an in-memory store.Store. Safe for concurrent use.
type Store struct {
	nextID atomic.Uint64

	mu     sync.Mutex
	closed bool
	err    error // sticky
	msgs   map[store.MsgID]*msgRec
	queues map[store.QueueID]*queue // queues with entries
	last   map[store.QueueID]uint64 // LastSeq; kept when the entries go
	meta   map[string][]byte
}

// New returns an empty store.
func New() *Store {
	return &Store{
		msgs:   make(map[store.MsgID]*msgRec),
		queues: make(map[store.QueueID]*queue),
		last:   make(map[store.QueueID]uint64),
		meta:   make(map[string][]byte),
	}
}

// Reopen closes s and returns a new store with the same contents, as a disk
// store reopened after a restart would have.
func (s *Store) Reopen() *Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	n := New()
	n.nextID.Store(s.nextID.Load())
	n.msgs, n.queues, n.last, n.meta = s.msgs, s.queues, s.last, s.meta
	s.msgs, s.queues, s.last, s.meta = nil, nil, nil, nil
	return n
}

// AllocMsgID implements store.Store.
func (s *Store) AllocMsgID() store.MsgID { return store.MsgID(s.nextID.Add(1)) }

// Apply implements store.Store. done runs before Apply returns.
func (s *Store) Apply(b *store.Batch, done func(error)) {
	err := s.apply(b)
	if done != nil {
		done(err)
	}
}

func (s *Store) apply(b *store.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	if s.err != nil {
		return s.err
	}
	if err := s.validateLocked(b); err != nil {
		s.err = err
		return err
	}
	for _, m := range b.Messages {
		if _, ok := s.msgs[m.ID]; !ok {
			s.msgs[m.ID] = &msgRec{msg: m}
		}
	}
	for i := range b.Puts {
		e := b.Puts[i] // copy: the store owns its entries
		q := s.queues[e.Queue]
		if q == nil {
			q = newQueue()
			s.queues[e.Queue] = q
		}
		rec := s.msgs[e.Msg.ID]
		e.Msg = rec.msg
		rec.refs++
		q.put(&e)
		s.last[e.Queue] = max(s.last[e.Queue], e.Seq)
	}
	for _, u := range b.Updates {
		s.queues[u.Queue].entries[u.Seq].SetFrom(&u)
	}
	for _, r := range b.Deletes {
		q := s.queues[r.Queue]
		s.unrefLocked(q.remove(r.Seq).Msg.ID)
		if len(q.entries) == 0 {
			delete(s.queues, r.Queue)
		}
	}
	for _, qid := range b.DropQueues {
		if q := s.queues[qid]; q != nil {
			for _, e := range q.entries {
				s.unrefLocked(e.Msg.ID)
			}
		}
		delete(s.queues, qid)
		delete(s.last, qid)
	}
	for _, op := range b.Meta {
		if op.Value == nil {
			delete(s.meta, op.Key)
		} else {
			s.meta[op.Key] = bytes.Clone(op.Value)
		}
	}
	// Messages listed in the batch but referenced by no entry are not kept.
	for _, m := range b.Messages {
		if rec := s.msgs[m.ID]; rec != nil && rec.refs == 0 {
			delete(s.msgs, m.ID)
		}
	}
	return nil
}

// validateLocked checks the whole batch before anything is applied, so that
// a bad batch changes nothing.
func (s *Store) validateLocked(b *store.Batch) error {
	fresh := make(map[store.MsgID]bool, len(b.Messages))
	for _, m := range b.Messages {
		if m == nil || m.ID == 0 {
			return fmt.Errorf("%w: message without id", store.ErrInvalidBatch)
		}
		if fresh[m.ID] {
			return fmt.Errorf("%w: message %d listed twice", store.ErrInvalidBatch, m.ID)
		}
		fresh[m.ID] = true
	}
	put := make(map[store.Ref]bool, len(b.Puts))
	for i := range b.Puts {
		e := &b.Puts[i]
		if e.Msg == nil {
			return fmt.Errorf("%w: entry %v without message", store.ErrInvalidBatch, e.Ref)
		}
		if _, ok := s.msgs[e.Msg.ID]; !ok && !fresh[e.Msg.ID] {
			return fmt.Errorf("%w: entry %v refers to unknown message %d", store.ErrInvalidBatch, e.Ref, e.Msg.ID)
		}
		if s.entry(e.Queue, e.Seq) != nil || put[e.Ref] {
			return fmt.Errorf("%w: entry %v already exists", store.ErrInvalidBatch, e.Ref)
		}
		put[e.Ref] = true
	}
	exists := func(r store.Ref) bool {
		return s.entry(r.Queue, r.Seq) != nil || put[r]
	}
	for _, u := range b.Updates {
		if !exists(u.Ref) {
			return fmt.Errorf("%w: update of unknown entry %v", store.ErrInvalidBatch, u.Ref)
		}
	}
	del := make(map[store.Ref]bool, len(b.Deletes))
	for _, r := range b.Deletes {
		if put[r] {
			return fmt.Errorf("%w: entry %v put and deleted in one batch", store.ErrInvalidBatch, r)
		}
		if !exists(r) || del[r] {
			return fmt.Errorf("%w: delete of unknown entry %v", store.ErrInvalidBatch, r)
		}
		del[r] = true
	}
	return nil
}

// entry returns the stored entry (q, seq), nil if there is none.
func (s *Store) entry(q store.QueueID, seq uint64) *store.Entry {
	if mq := s.queues[q]; mq != nil {
		return mq.entries[seq]
	}
	return nil
}

func (s *Store) unrefLocked(id store.MsgID) {
	rec := s.msgs[id]
	rec.refs--
	if rec.refs == 0 {
		delete(s.msgs, id)
	}
}

// ScanQueue implements store.Store.
func (s *Store) ScanQueue(q store.QueueID, from uint64, fn func(*store.Entry) bool) error {
	entries, err := s.collect(func(e *store.Entry) bool { return e.Queue == q && e.Seq >= from }, q)
	if err != nil {
		return err
	}
	slices.SortFunc(entries, func(a, b *store.Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	for _, e := range entries {
		if !fn(e) {
			break
		}
	}
	return nil
}

// ScanDeadlines calls fn for entries with 0 < Deadline <= until, in
// (Deadline, Queue, Seq) order, until fn returns false. It is not part of
// store.Store (the broker reads DeadlineRefs); it implements
// storetest.DeadlineScanner, for the conformance suite.
func (s *Store) ScanDeadlines(until int64, fn func(*store.Entry) bool) error {
	entries, err := s.collect(func(e *store.Entry) bool { return e.Deadline > 0 && e.Deadline <= until }, 0)
	if err != nil {
		return err
	}
	slices.SortFunc(entries, func(a, b *store.Entry) int {
		return cmp.Or(cmp.Compare(a.Deadline, b.Deadline), cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Seq, b.Seq))
	})
	for _, e := range entries {
		if !fn(e) {
			break
		}
	}
	return nil
}

// collect copies matching entries under the lock so fn runs without it
// (fn may call back into the store). q limits the walk to one queue when
// non-zero.
func (s *Store) collect(match func(*store.Entry) bool, q store.QueueID) ([]*store.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	var out []*store.Entry
	add := func(m map[uint64]*store.Entry) {
		for _, e := range m {
			if match(e) {
				c := *e
				out = append(out, &c)
			}
		}
	}
	if q != 0 {
		if mq := s.queues[q]; mq != nil {
			add(mq.entries)
		}
		return out, nil
	}
	for _, mq := range s.queues {
		add(mq.entries)
	}
	return out, nil
}

// LastSeq implements store.Store.
func (s *Store) LastSeq(q store.QueueID) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, store.ErrClosed
	}
	return s.last[q], nil
}

// ScanMeta implements store.Store.
func (s *Store) ScanMeta(prefix string, fn func(key string, value []byte) bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	type kv struct {
		k string
		v []byte
	}
	var out []kv
	for k, v := range s.meta {
		if strings.HasPrefix(k, prefix) {
			out = append(out, kv{k, v})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b kv) int { return strings.Compare(a.k, b.k) })
	for _, e := range out {
		if !fn(e.k, bytes.Clone(e.v)) {
			break
		}
	}
	return nil
}

// Reserve implements store.Store: the memory store writes nothing that
// could back up, so it never waits.
func (s *Store) Reserve(context.Context, int) error { return nil }

// Close implements store.Store.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

var _ store.Store = (*Store)(nil)

// DeadlineRefs implements store.Store. It walks every entry: a memory
// store is not meant to page.
func (s *Store) DeadlineRefs(from, until int64, fn func(deadline int64, r store.Ref) bool) error {
	entries, err := s.collect(func(e *store.Entry) bool { return e.Deadline != 0 && e.Deadline >= from && e.Deadline <= until }, 0)
	if err != nil {
		return err
	}
	slices.SortFunc(entries, func(a, b *store.Entry) int {
		return cmp.Or(cmp.Compare(a.Deadline, b.Deadline), cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Prio, b.Prio), cmp.Compare(a.Seq, b.Seq))
	})
	for _, e := range entries {
		if !fn(e.Deadline, e.Ref) {
			break
		}
	}
	return nil
}
