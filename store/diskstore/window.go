package diskstore

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/store"
)

// Window reads for a paging queue: ReadEntries reads one level's entries
// from a seq as metadata (one index range scan from that seq, merged with
// the overlays); LoadMessages reads bodies by message id.

// seqIndex is a set of seqs read in ascending order: an overlay level's
// puts, deletes or updates. Seqs are appended as they come (nearly always
// ascending: a queue's seqs grow), sorted and deduplicated by the first
// read after one came out of order, and compacted once most were removed.
// Removal is lazy: the overlay's maps say whether a seq still belongs.
// A seqIndex is touched only under the store's mu, also in a frozen
// overlay (whose maps are read-only; a read may sort its seqIndexes).
type seqIndex struct {
	seqs     []uint64
	unsorted bool
	stale    int // removed seqs still in seqs, roughly
}

func (x *seqIndex) add(seq uint64) {
	if n := len(x.seqs); n > 0 && seq <= x.seqs[n-1] {
		x.unsorted = true
	}
	x.seqs = append(x.seqs, seq)
}

// removed notes that one seq left the set; live says which still belong.
func (x *seqIndex) removed(live func(uint64) bool) {
	x.stale++
	if x.stale <= 64 || x.stale <= len(x.seqs)/2 {
		return
	}
	x.seqs = slices.DeleteFunc(x.seqs, func(seq uint64) bool { return !live(seq) })
	if len(x.seqs) < cap(x.seqs)/4 {
		x.seqs = slices.Clip(slices.Clone(x.seqs))
	}
	x.stale = 0
}

// from returns the seqs >= from in ascending order, without duplicates;
// some may have been removed. The result is valid until the next change.
func (x *seqIndex) from(from uint64) []uint64 {
	if x.unsorted {
		slices.Sort(x.seqs)
		x.seqs = slices.Compact(x.seqs)
		x.unsorted = false
	}
	i, _ := slices.BinarySearch(x.seqs, from)
	return x.seqs[i:]
}

// levelLayer is what one overlay changes in one level of a queue from a
// seq on, as a window read needs it, copied under mu.
type levelLayer struct {
	dropped bool
	dels    []uint64       // deleted older entries, ascending
	upds    []store.Update // updates of older entries, ascending seq
	puts    []ovEntry      // its first puts, ascending, at most max
}

// levelLayer copies o's changes to level prio of q from seq from on. later
// is the queue in the overlay above o (the active one when o is frozen):
// its deletes and updates apply to o's puts, and a drop hides them. Call
// with mu held. It costs O(log + max + o's deletes and updates of the
// level at or after from + puts it skips as deleted).
func (o *overlay) levelLayer(q store.QueueID, prio uint8, from uint64, max int, later *ovQueue) levelLayer {
	var l levelLayer
	oq := o.queues[q]
	if oq == nil {
		return l
	}
	l.dropped = oq.dropped
	lv := oq.levels[prio]
	if lv == nil {
		return l
	}
	for _, seq := range lv.dels.from(from) {
		if p, ok := oq.dels[seq]; ok && p.prio() == prio {
			l.dels = append(l.dels, seq)
		}
	}
	for _, seq := range lv.upds.from(from) {
		if u, ok := oq.upds[seq]; ok && u.Prio == prio {
			l.upds = append(l.upds, u)
		}
	}
	if later != nil && later.dropped {
		return l
	}
	for _, seq := range lv.puts.from(from) {
		if len(l.puts) == max {
			break
		}
		e := oq.entries[seq]
		if e == nil || e.Prio != prio {
			continue
		}
		c := *e
		if later != nil {
			if p, gone := later.dels[seq]; gone && p.prio() == prio {
				continue
			}
			if u, ok := later.upds[seq]; ok && u.Prio == prio {
				c.SetFrom(&u)
			}
		}
		l.puts = append(l.puts, c)
	}
	return l
}

func (l *levelLayer) deleted(seq uint64) bool {
	_, ok := slices.BinarySearch(l.dels, seq)
	return ok
}

func (l *levelLayer) update(seq uint64) (store.Update, bool) {
	i, ok := slices.BinarySearchFunc(l.upds, seq, func(u store.Update, seq uint64) int { return cmp.Compare(u.Seq, seq) })
	if !ok {
		return store.Update{}, false
	}
	return l.upds[i], true
}

// ReadEntries implements store.Store. It scans the index from
// (q, prio, from) (index.LevelBounds) and merges the overlays' changes to
// that level, which each overlay keeps in seq order: O(max + the level's
// overlay deletes and updates at or after from), never the level's depth
// nor the overlay's size. No body is read; a put whose body size the
// overlay does not know costs one message record read.
func (s *Store) ReadEntries(q store.QueueID, prio uint8, from uint64, max int, dst []store.EntryMeta) ([]store.EntryMeta, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return dst, store.ErrClosed
	}
	if max <= 0 {
		s.mu.Unlock()
		return dst, nil
	}
	v := s.newSnapView()
	var frozen levelLayer
	if v.frozen != nil {
		frozen = v.frozen.levelLayer(q, prio, from, max, v.active.queues[q])
	}
	active := v.active.levelLayer(q, prio, from, max, nil)
	s.mu.Unlock()
	defer v.snap.Close()
	if err := v.settle(); err != nil {
		return dst, err
	}
	layers := []*levelLayer{&active}
	puts := active.puts
	if v.frozen != nil {
		layers = []*levelLayer{&frozen, &active} // oldest first
		puts = append(frozen.puts, active.puts...)
		slices.SortFunc(puts, func(a, b ovEntry) int { return cmp.Compare(a.Seq, b.Seq) })
	}

	// The index's entries, unless a layer dropped the queue.
	var it *pebble.Iterator
	if !slices.ContainsFunc(layers, func(l *levelLayer) bool { return l.dropped }) {
		lo, hi := index.LevelBounds(uint64(q), prio, from)
		var err error
		if it, err = v.snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi}); err != nil {
			return dst, err
		}
		defer it.Close()
		it.First()
	}
	// nextIndex positions it on the next entry no layer deleted and
	// returns its seq.
	nextIndex := func() (uint64, bool, error) {
		for ; it != nil && it.Valid(); it.Next() {
			_, _, seq, err := index.DecodeEntryKey(it.Key())
			if err != nil {
				return 0, false, fmt.Errorf("read queue %d level %d: %w", q, prio, err)
			}
			if !slices.ContainsFunc(layers, func(l *levelLayer) bool { return l.deleted(seq) }) {
				return seq, true, nil
			}
		}
		return 0, false, nil
	}

	var ev index.EntryValue
	for n := 0; n < max; n++ {
		seq, ok, err := nextIndex()
		if err != nil {
			return dst, err
		}
		if len(puts) > 0 && (!ok || puts[0].Seq <= seq) {
			if ok && puts[0].Seq == seq {
				it.Next() // the overlay's put replaces it
			}
			m, err := v.putMeta(&puts[0])
			if err != nil {
				return dst, err
			}
			dst = append(dst, m)
			puts = puts[1:]
			continue
		}
		if !ok {
			break
		}
		if err := index.DecodeEntryValue(it.Value(), &ev); err != nil {
			return dst, fmt.Errorf("read entry %d/%d/%d: %w", q, prio, seq, err)
		}
		m := metaFromIndex(store.Ref{Queue: q, Prio: prio, Seq: seq}, &ev)
		for _, l := range layers {
			if u, ok := l.update(seq); ok {
				m.SetFrom(&u)
			}
		}
		dst = append(dst, m)
		it.Next()
	}
	return dst, nil
}

// ReadRefs implements store.Store: each ref is looked up in the overlays,
// newest first (a put there is the entry; a delete or a drop means none;
// the newest update applies to what an older layer or the index holds),
// and the rest in the index through one snapshot iterator, in key order.
func (s *Store) ReadRefs(refs []store.Ref, dst []store.EntryMeta) ([]store.EntryMeta, error) {
	type refRead struct {
		put   *ovEntry
		upd   *store.Update // the newest update, if any
		gone  bool
		found bool
		meta  store.EntryMeta
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return dst, store.ErrClosed
	}
	v := s.newSnapView()
	reads := make([]refRead, len(refs))
	var fromIndex []int
	for i, r := range refs {
		rr := &reads[i]
		resolved := false
		for _, o := range []*overlay{v.active, v.frozen} {
			if o == nil {
				continue
			}
			oq := o.queues[r.Queue]
			if oq == nil {
				continue
			}
			if e := oq.entries[r.Seq]; e != nil && e.Prio == r.Prio {
				c := *e
				rr.put, resolved = &c, true
				break
			}
			if p, ok := oq.dels[r.Seq]; (ok && p.prio() == r.Prio) || oq.dropped {
				rr.gone, resolved = true, true
				break
			}
			if u, ok := oq.upds[r.Seq]; ok && u.Prio == r.Prio && rr.upd == nil {
				rr.upd = &u
			}
		}
		if !resolved {
			fromIndex = append(fromIndex, i)
		}
	}
	s.mu.Unlock()
	defer v.snap.Close()
	for i := range reads {
		rr := &reads[i]
		if rr.put == nil {
			continue
		}
		m, err := v.putMeta(rr.put)
		if err != nil {
			return dst, err
		}
		rr.meta, rr.found = m, true
	}
	if len(fromIndex) > 0 {
		slices.SortFunc(fromIndex, func(a, b int) int {
			ra, rb := refs[a], refs[b]
			return cmp.Or(cmp.Compare(ra.Queue, rb.Queue), cmp.Compare(ra.Prio, rb.Prio), cmp.Compare(ra.Seq, rb.Seq))
		})
		it, err := v.snap.NewIter(nil)
		if err != nil {
			return dst, err
		}
		defer it.Close()
		var key []byte
		var ev index.EntryValue
		for _, i := range fromIndex {
			r := refs[i]
			key = index.EntryKey(key[:0], uint64(r.Queue), r.Prio, r.Seq)
			if !it.SeekGE(key) || !bytes.Equal(it.Key(), key) {
				if err := it.Error(); err != nil {
					return dst, err
				}
				continue
			}
			if err := index.DecodeEntryValue(it.Value(), &ev); err != nil {
				return dst, fmt.Errorf("read entry %d/%d/%d: %w", r.Queue, r.Prio, r.Seq, err)
			}
			reads[i].meta, reads[i].found = metaFromIndex(r, &ev), true
		}
	}
	for i := range reads {
		rr := &reads[i]
		if !rr.found {
			continue
		}
		if u := rr.upd; u != nil {
			rr.meta.SetFrom(u)
		}
		dst = append(dst, rr.meta)
	}
	return dst, nil
}

// putMeta is an overlay entry's metadata.
func (v *snapView) putMeta(e *ovEntry) (store.EntryMeta, error) {
	size := e.size
	if !e.sized {
		var err error
		if size, err = v.msgSize(e.Msg.ID); err != nil {
			return store.EntryMeta{}, err
		}
	}
	return e.Meta(size), nil
}

// metaFromIndex is an index entry's metadata; it copies what ev aliases.
func metaFromIndex(r store.Ref, ev *index.EntryValue) store.EntryMeta {
	m := store.EntryMeta{
		Ref:           r,
		Msg:           store.MsgID(ev.Msg),
		Size:          ev.Size,
		Deadline:      ev.Deadline,
		DeliveryCount: ev.DeliveryCount,
		AcquiredCount: ev.AcquiredCount,
		ReadyAt:       ev.ReadyAt,
		DeadLetter:    string(ev.DeadLetter),
		DeadAt:        ev.DeadAt,
		Origin:        originFromIndex(ev.Origin),
	}
	if h := ev.Header; h != nil {
		m.Header = &store.Header{Exchange: string(h.Exchange), Props: bytes.Clone(h.Props)}
		if len(h.RoutingKeys) > 0 {
			m.Header.RoutingKeys = make([]string, len(h.RoutingKeys))
			for i, k := range h.RoutingKeys {
				m.Header.RoutingKeys[i] = string(k)
			}
		}
	}
	return m
}

// LoadMessages implements store.Store. Each distinct id is read once: from
// an overlay if one holds the body, else from its segment, all of those in
// one segment.ReadManyDamaged under segMu. A message whose last entry was
// deleted since the last checkpoint may still be found; one the index and
// the overlays do not have is ErrUnknownMessage. One in a damaged segment
// block is named in a *store.DamageError after fn ran for the others.
func (s *Store) LoadMessages(ids []store.MsgID, fn func(i int, m *store.Message)) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	found := make(map[store.MsgID]*store.Message, len(ids))
	var need []store.MsgID
	for _, id := range ids {
		if _, seen := found[id]; seen {
			continue
		}
		m := s.active.message(id)
		if m == nil && s.frozen != nil {
			m = s.frozen.message(id)
		}
		found[id] = m
		if m == nil {
			need = append(need, id)
		}
	}
	s.mu.Unlock()
	var dmg *store.DamageError
	if len(need) > 0 {
		v := &view{s: s}
		var err error
		if dmg, err = v.readMessages(need, found); err != nil {
			return fmt.Errorf("load messages: %w", err)
		}
	}
	for i, id := range ids {
		if m := found[id]; m != nil {
			fn(i, m)
		}
	}
	if dmg != nil {
		return dmg
	}
	return nil
}
