package diskstore

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/segment"
	"github.com/brokerd/brokerd/store"
)

// view is what a read sees: the overlays as they were and an index
// snapshot taken at the same instant (under mu), so a checkpoint that
// commits meanwhile can neither hide nor double what the read sees.
type view struct {
	s      *Store
	layers []*overlay // oldest first: frozen, then active
	snap   *pebble.Snapshot
}

// queueLayer is one overlay's changes to one queue, copied under mu.
type queueLayer struct {
	dropped bool
	dels    map[uint64]bool
	upds    map[uint64]store.Update
	entries []store.Entry
}

// queueView copies the overlays' changes to q (Seq >= from) and takes an
// index snapshot.
func (s *Store) queueView(q store.QueueID, from uint64) ([]queueLayer, *view, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, store.ErrClosed
	}
	v := &view{s: s, snap: s.db.NewSnapshot()}
	var layers []queueLayer
	for _, o := range []*overlay{s.frozen, s.active} {
		if o == nil {
			continue
		}
		v.layers = append(v.layers, o)
		oq := o.queues[q]
		if oq == nil {
			continue
		}
		l := queueLayer{dropped: oq.dropped, upds: maps.Clone(oq.upds)}
		if len(oq.dels) > 0 {
			l.dels = make(map[uint64]bool, len(oq.dels))
			for seq := range oq.dels {
				l.dels[seq] = true
			}
		}
		for seq, e := range oq.entries {
			if seq >= from {
				l.entries = append(l.entries, e.Entry)
			}
		}
		layers = append(layers, l)
	}
	return layers, v, nil
}

// ScanQueue implements store.Store.
func (s *Store) ScanQueue(q store.QueueID, from uint64, fn func(*store.Entry) bool) error {
	layers, v, err := s.queueView(q, from)
	if err != nil {
		return err
	}
	defer v.snap.Close()
	byseq := make(map[uint64]*store.Entry)
	lo, hi := index.QueueBounds(uint64(q))
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		_, prio, seq, err := index.DecodeEntryKey(it.Key())
		if err != nil {
			it.Close()
			return fmt.Errorf("scan queue %d: %w", q, err)
		}
		if seq < from {
			continue
		}
		e, err := entryFromIndex(q, prio, seq, it.Value())
		if err != nil {
			it.Close()
			return fmt.Errorf("scan queue %d: %w", q, err)
		}
		byseq[seq] = e
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, l := range layers {
		if l.dropped {
			clear(byseq)
		}
		for seq := range l.dels {
			delete(byseq, seq)
		}
		for seq, u := range l.upds {
			if e := byseq[seq]; e != nil {
				e.SetFrom(&u)
			}
		}
		for i := range l.entries {
			e := l.entries[i]
			byseq[e.Seq] = &e
		}
	}
	out := make([]*store.Entry, 0, len(byseq))
	for _, e := range byseq {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *store.Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	if err := v.loadMessages(out); err != nil {
		return fmt.Errorf("scan queue %d: %w", q, err)
	}
	for _, e := range out {
		if !fn(e) {
			break
		}
	}
	return nil
}

// entryFromIndex builds an entry from its index value; its Msg is a stub
// holding the id until loadMessages fills it.
func entryFromIndex(q store.QueueID, prio uint8, seq uint64, raw []byte) (*store.Entry, error) {
	var ev index.EntryValue
	if err := index.DecodeEntryValue(bytes.Clone(raw), &ev); err != nil {
		return nil, err
	}
	e := &store.Entry{
		Ref:           store.Ref{Queue: q, Prio: prio, Seq: seq},
		Msg:           &store.Message{ID: store.MsgID(ev.Msg)},
		Deadline:      ev.Deadline,
		DeliveryCount: ev.DeliveryCount,
		AcquiredCount: ev.AcquiredCount,
		ReadyAt:       ev.ReadyAt,
		DeadLetter:    string(ev.DeadLetter),
		DeadAt:        ev.DeadAt,
		Origin:        originFromIndex(ev.Origin),
	}
	if h := ev.Header; h != nil {
		e.Header = &store.Header{Exchange: string(h.Exchange), Props: h.Props}
		for _, k := range h.RoutingKeys {
			e.Header.RoutingKeys = append(e.Header.RoutingKeys, string(k))
		}
	}
	return e, nil
}

// loadMessages replaces every entry's message with the stored one, body
// included: from an overlay when it is there, else from its segment. One
// *Message is shared by the entries that refer to the same id.
func (v *view) loadMessages(entries []*store.Entry) error {
	loaded := make(map[store.MsgID]*store.Message)
	var need []store.MsgID
	for _, e := range entries {
		id := e.Msg.ID
		if m := loaded[id]; m != nil {
			e.Msg = m
			continue
		}
		var m *store.Message
		for i := len(v.layers) - 1; i >= 0 && m == nil; i-- {
			m = v.s.overlayMessage(v.layers[i], id)
		}
		if m != nil {
			loaded[id] = m
			e.Msg = m
			continue
		}
		if _, ok := loaded[id]; !ok {
			loaded[id] = nil
			need = append(need, id)
		}
	}
	if len(need) > 0 {
		dmg, err := v.readMessages(need, loaded)
		if err != nil {
			return err
		}
		if dmg != nil {
			return dmg
		}
	}
	for _, e := range entries {
		if m := loaded[e.Msg.ID]; m != nil {
			e.Msg = m
		} else {
			return fmt.Errorf("entry %d/%d refers to message %d: %w", e.Queue, e.Seq, e.Msg.ID, store.ErrUnknownMessage)
		}
	}
	return nil
}

// overlayMessage looks id up in o under mu: o may be the active overlay,
// which Apply changes.
func (s *Store) overlayMessage(o *overlay, id store.MsgID) *store.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return o.message(id)
}

// readMessages reads messages from their segments. A message whose
// segment block is damaged is left out of into and named in the
// *store.DamageError returned (nil when there is none).
func (v *view) readMessages(ids []store.MsgID, into map[store.MsgID]*store.Message) (*store.DamageError, error) {
	s := v.s
	var dmg *store.DamageError
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	locs := make([]segment.Loc, len(ids))
	// Message records are read from the live index, not the snapshot:
	// compaction may have moved the body since, and segMu keeps the
	// location it names readable until we are done. In id order: one
	// forward sweep of an iterator.
	order := make([]int, len(ids))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(ids[a], ids[b]) })
	pr, err := s.newPointReader()
	if err != nil {
		return nil, err
	}
	defer pr.close()
	var key []byte
	var mv index.MsgValue
	for _, i := range order {
		id := ids[i]
		key = index.MsgKey(key[:0], uint64(id))
		raw, ok, err := pr.get(key)
		if err != nil {
			return nil, fmt.Errorf("read message %d: %w", id, err)
		}
		if !ok {
			return nil, fmt.Errorf("read message %d: %w", id, store.ErrUnknownMessage)
		}
		if err := index.DecodeMsgValue(raw, &mv); err != nil {
			return nil, fmt.Errorf("read message %d: %w", id, err)
		}
		if locs[i], err = segment.DecodeLoc(mv.Loc); err != nil {
			return nil, fmt.Errorf("message %d location: %w", id, err)
		}
	}
	err = s.segs.ReadManyDamaged(locs, func(i int, blob []byte) error {
		m, err := decodeBlob(blob)
		if err != nil {
			return fmt.Errorf("message %d: %w", ids[i], err)
		}
		if m.ID != ids[i] {
			return fmt.Errorf("message %d: segment holds message %d there", ids[i], m.ID)
		}
		into[m.ID] = m
		return nil
	}, func(i int, ce *segment.CorruptError) error {
		dmg = addDamage(dmg, ce.File, ce.Offset, ce.Reason, ids[i])
		return nil
	})
	return dmg, err
}

// addDamage adds message id, held by the damage at offset of file, to d
// (a new one if nil) and returns it.
func addDamage(d *store.DamageError, file string, offset int64, reason string, id store.MsgID) *store.DamageError {
	if d == nil {
		d = new(store.DamageError)
	}
	for i := range d.Damage {
		if x := &d.Damage[i]; x.File == file && x.Offset == offset {
			x.Msgs = append(x.Msgs, id)
			return d
		}
	}
	d.Damage = append(d.Damage, store.Damage{File: file, Offset: offset, Reason: reason, Msgs: []store.MsgID{id}})
	return d
}

// ScanDeadlines calls fn for entries with 0 < Deadline <= until, in
// (Deadline, Queue, Seq) order, until fn returns false. It reads every
// queue that has an entry with a deadline in full. It is not part of
// store.Store (the broker reads DeadlineRefs); it implements
// storetest.DeadlineScanner, for the conformance suite and the model test.
func (s *Store) ScanDeadlines(until int64, fn func(*store.Entry) bool) error {
	// Collect the refs with deadlines from the index and the overlays,
	// then read each queue's entries once.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	snap := s.db.NewSnapshot()
	queues := make(map[store.QueueID]bool)
	for _, o := range []*overlay{s.frozen, s.active} {
		if o == nil {
			continue
		}
		for q, oq := range o.queues {
			for _, e := range oq.entries {
				if e.Deadline > 0 && e.Deadline <= until {
					queues[q] = true
					break
				}
			}
		}
	}
	s.mu.Unlock()
	lo, hi := index.ExpiryBounds(1, until)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		snap.Close()
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		_, q, _, _, err := index.DecodeExpiryKey(it.Key())
		if err != nil {
			it.Close()
			snap.Close()
			return err
		}
		queues[store.QueueID(q)] = true
	}
	it.Close()
	snap.Close()
	var due []*store.Entry
	for q := range queues {
		err := s.ScanQueue(q, 0, func(e *store.Entry) bool {
			if e.Deadline > 0 && e.Deadline <= until {
				due = append(due, e)
			}
			return true
		})
		if err != nil {
			return err
		}
	}
	slices.SortFunc(due, func(a, b *store.Entry) int {
		return cmp.Or(cmp.Compare(a.Deadline, b.Deadline), cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Seq, b.Seq))
	})
	for _, e := range due {
		if !fn(e) {
			break
		}
	}
	return nil
}

// deadlineRef is one report of DeadlineRefs.
type deadlineRef struct {
	deadline int64
	ref      store.Ref
}

func cmpDeadlineRef(a, b deadlineRef) int {
	return cmp.Or(cmp.Compare(a.deadline, b.deadline), cmp.Compare(a.ref.Queue, b.ref.Queue),
		cmp.Compare(a.ref.Prio, b.ref.Prio), cmp.Compare(a.ref.Seq, b.ref.Seq))
}

// DeadlineRefs implements store.Store: the index's expiry keys in the
// range, merged with the overlays' puts that have a deadline in it. An
// entry deleted in an overlay may still be reported from the index (the
// contract allows it), so no overlay's deletes need copying.
func (s *Store) DeadlineRefs(from, until int64, fn func(deadline int64, r store.Ref) bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	v := s.newSnapView()
	var puts []deadlineRef
	for _, o := range []*overlay{v.frozen, v.active} {
		if o == nil {
			continue
		}
		for _, oq := range o.queues {
			for _, e := range oq.entries {
				if e.Deadline != 0 && e.Deadline >= from && e.Deadline <= until {
					puts = append(puts, deadlineRef{e.Deadline, e.Ref})
				}
			}
		}
	}
	s.mu.Unlock()
	defer v.snap.Close()
	if err := v.settle(); err != nil {
		return err
	}
	slices.SortFunc(puts, cmpDeadlineRef)
	puts = slices.Compact(puts) // a frozen overlay's put may be in the active one's view too
	lo, hi := index.ExpiryBounds(from, until)
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	defer it.Close()
	it.First()
	for {
		var next deadlineRef
		fromIndex := it.Valid()
		if fromIndex {
			d, q, prio, seq, err := index.DecodeExpiryKey(it.Key())
			if err != nil {
				return err
			}
			next = deadlineRef{d, store.Ref{Queue: store.QueueID(q), Prio: prio, Seq: seq}}
		}
		switch {
		case len(puts) > 0 && (!fromIndex || cmpDeadlineRef(puts[0], next) <= 0):
			if fromIndex && puts[0] == next {
				it.Next()
			}
			next, puts = puts[0], puts[1:]
		case fromIndex:
			it.Next()
		default:
			return nil
		}
		if !fn(next.deadline, next.ref) {
			return nil
		}
	}
}

// ScanMeta implements store.Store.
func (s *Store) ScanMeta(prefix string, fn func(key string, value []byte) bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	snap := s.db.NewSnapshot()
	over := make(map[string][]byte)
	for _, o := range []*overlay{s.frozen, s.active} {
		if o == nil {
			continue
		}
		for k, v := range o.meta {
			if strings.HasPrefix(k, prefix) {
				over[k] = v
			}
		}
	}
	s.mu.Unlock()
	defer snap.Close()
	merged := make(map[string][]byte)
	lo, hi := index.MetaPrefixBounds([]byte(prefix))
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		k, err := index.DecodeMetaKey(it.Key())
		if err != nil {
			it.Close()
			return err
		}
		merged[string(k)] = bytes.Clone(it.Value())
	}
	if err := it.Close(); err != nil {
		return err
	}
	for k, v := range over {
		if v == nil {
			delete(merged, k)
		} else {
			merged[k] = bytes.Clone(v)
		}
	}
	keys := make([]string, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !fn(k, merged[k]) {
			break
		}
	}
	return nil
}
