package memstore

import (
	"fmt"
	"slices"

	"github.com/brokerd/brokerd/store"
)

// queue is one queue's stored entries: by seq, and per priority level in
// seq order with the level's counters, so QueueState costs O(levels) and a
// window read does not walk the whole queue.
type queue struct {
	entries map[uint64]*store.Entry
	levels  map[uint8]*level
}

// level is one priority level: its seqs in ascending order and its
// counters. Deleting an entry does not shift the slice (acks would make
// that O(depth) each): the seq stays behind as dead until the head moves
// past it or a compaction drops it. Invariants: seqs[head:] is sorted;
// seqs[head] is live when head < len(seqs); dead counts the dead seqs in
// seqs[head:]; seqs[:head] is garbage.
type level struct {
	seqs  []uint64
	head  int
	dead  int
	count int64
	bytes int64
}

func newQueue() *queue {
	return &queue{entries: make(map[uint64]*store.Entry), levels: make(map[uint8]*level)}
}

// live reports whether seq is a stored entry of level prio.
func (q *queue) live(prio uint8, seq uint64) bool {
	e := q.entries[seq]
	return e != nil && e.Prio == prio
}

// put adds e, which the caller has checked is not stored.
func (q *queue) put(e *store.Entry) {
	q.entries[e.Seq] = e
	l := q.levels[e.Prio]
	if l == nil {
		l = &level{}
		q.levels[e.Prio] = l
	}
	l.count++
	l.bytes += int64(len(e.Msg.Body))
	// Seqs grow, so this is nearly always an append.
	pos, found := slices.BinarySearch(l.seqs[l.head:], e.Seq)
	pos += l.head
	switch {
	case found: // a dead seq put again
		l.dead--
	case pos == len(l.seqs):
		l.seqs = append(l.seqs, e.Seq)
	case pos == l.head && l.head > 0:
		l.head--
		l.seqs[l.head] = e.Seq
	default:
		l.seqs = slices.Insert(l.seqs, pos, e.Seq)
	}
}

// remove deletes the stored entry seq and returns it.
func (q *queue) remove(seq uint64) *store.Entry {
	e := q.entries[seq]
	delete(q.entries, seq)
	l := q.levels[e.Prio]
	l.count--
	l.bytes -= int64(len(e.Msg.Body))
	if l.count == 0 {
		delete(q.levels, e.Prio)
		return e
	}
	l.dead++
	for l.head < len(l.seqs) && !q.live(e.Prio, l.seqs[l.head]) {
		l.head++
		l.dead--
	}
	switch n := len(l.seqs) - l.head; {
	case l.dead > 32 && l.dead > n/2: // mostly dead: keep the live ones
		live := make([]uint64, 0, n-l.dead)
		for _, s := range l.seqs[l.head:] {
			if q.live(e.Prio, s) {
				live = append(live, s)
			}
		}
		l.seqs, l.head, l.dead = live, 0, 0
	case l.head > 1024 && l.head > n: // mostly garbage in front: release it
		l.seqs, l.head = slices.Clone(l.seqs[l.head:]), 0
	}
	return e
}

// read appends the metadata of up to max live entries of level prio with
// seq >= from, in seq order.
func (q *queue) read(prio uint8, from uint64, max int, dst []store.EntryMeta) []store.EntryMeta {
	l := q.levels[prio]
	if l == nil {
		return dst
	}
	i, _ := slices.BinarySearch(l.seqs[l.head:], from)
	for _, seq := range l.seqs[l.head+i:] {
		if max <= 0 {
			break
		}
		if !q.live(prio, seq) {
			continue
		}
		e := q.entries[seq]
		dst = append(dst, e.Meta(uint32(len(e.Msg.Body))))
		max--
	}
	return dst
}

// state returns q's per-level counters in ascending priority.
func (q *queue) state(last uint64) store.QueueState {
	st := store.QueueState{LastSeq: last}
	if q == nil {
		return st
	}
	st.Levels = make([]store.LevelState, 0, len(q.levels))
	for prio, l := range q.levels {
		st.Levels = append(st.Levels, store.LevelState{Prio: prio, Count: l.count, Bytes: l.bytes})
	}
	slices.SortFunc(st.Levels, func(a, b store.LevelState) int { return int(a.Prio) - int(b.Prio) })
	return st
}

// Queues implements store.Store. It costs O(queues).
func (s *Store) Queues(fn func(store.QueueID, store.QueueState) bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	ids := make([]store.QueueID, 0, len(s.last)+len(s.queues))
	for q := range s.last {
		ids = append(ids, q)
	}
	for q := range s.queues {
		if _, ok := s.last[q]; !ok {
			ids = append(ids, q)
		}
	}
	slices.Sort(ids)
	states := make([]store.QueueState, len(ids))
	for i, q := range ids {
		states[i] = s.queues[q].state(s.last[q])
	}
	s.mu.Unlock()
	for i, q := range ids {
		if !fn(q, states[i]) {
			break
		}
	}
	return nil
}

// ReadEntries implements store.Store. It costs O(log(level) + max + the
// deleted seqs of the level it steps over).
func (s *Store) ReadEntries(q store.QueueID, prio uint8, from uint64, max int, dst []store.EntryMeta) ([]store.EntryMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return dst, store.ErrClosed
	}
	if mq := s.queues[q]; mq != nil && max > 0 {
		dst = mq.read(prio, from, max, dst)
	}
	return dst, nil
}

// ReadRefs implements store.Store.
func (s *Store) ReadRefs(refs []store.Ref, dst []store.EntryMeta) ([]store.EntryMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return dst, store.ErrClosed
	}
	for _, r := range refs {
		mq := s.queues[r.Queue]
		if mq == nil {
			continue
		}
		if e := mq.entries[r.Seq]; e != nil && e.Prio == r.Prio {
			dst = append(dst, e.Meta(uint32(len(e.Msg.Body))))
		}
	}
	return dst, nil
}

// LoadMessages implements store.Store.
func (s *Store) LoadMessages(ids []store.MsgID, fn func(i int, m *store.Message)) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	msgs := make([]*store.Message, len(ids))
	for i, id := range ids {
		rec := s.msgs[id]
		if rec == nil {
			s.mu.Unlock()
			return fmt.Errorf("load message %d: %w", id, store.ErrUnknownMessage)
		}
		msgs[i] = rec.msg
	}
	s.mu.Unlock()
	for i, m := range msgs {
		fn(i, m)
	}
	return nil
}
