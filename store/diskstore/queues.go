package diskstore

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/store"
)

// Queue counters (store.QueueState): the index holds each queue's state as
// of the last checkpoint, the overlays hold the changes since, and Queues
// adds them up. Nothing is counted by scanning entries.
//
// Apply counts what the batch tells it. A put adds one entry and its body
// size to its level: the size is the message's, which the batch carries or
// an overlay holds. A delete of an entry of the same overlay takes back
// what its put added. A delete of an older entry (in the index, or in the
// frozen overlay while a checkpoint runs) names only the entry, not its
// size: if the frozen overlay holds it, its size is there; otherwise the
// delete counts -1 entry at once and its bytes are pending. So is the size
// of a put whose message is in the index and whose body the batch did not
// carry (after a WAL replay, a dead-lettered copy's message is an id only).
//
// Queues resolves what is pending with one index read per pending change,
// taken from the read's snapshot: an entry's size from its index value, a
// message's from its index record. A delete whose entry is not there (the
// disk store does not validate deletes) gives back its count. Results for
// the active overlay are written back into it, so each pending change is
// read at most once; the frozen overlay is read-only and is resolved again
// by every Queues call during its checkpoint. After a restart every delete
// replayed from the WAL is pending, so the first Queues call after Open
// costs one index read per replayed delete (bounded by CheckpointBytes).
//
// The checkpoint does not use these deltas: it computes the new state from
// the index state and what it writes (it reads every deleted entry from the
// index anyway), so the index's counters are exact whatever an overlay
// miscounted.

// ovLevel is one priority level of a queue in an overlay: the change to
// its counters, and the seqs of its puts, of its deletes of older entries
// and of its updates of older entries, for window reads (window.go).
type ovLevel struct {
	count, bytes int64
	puts         seqIndex
	dels         seqIndex
	upds         seqIndex
}

func (oq *ovQueue) level(prio uint8) *ovLevel {
	if oq.levels == nil {
		oq.levels = make(map[uint8]*ovLevel)
	}
	l := oq.levels[prio]
	if l == nil {
		l = new(ovLevel)
		oq.levels[prio] = l
	}
	return l
}

// addPut counts e, just put in this overlay (and in oq.entries).
func (oq *ovQueue) addPut(e *ovEntry) {
	l := oq.level(e.Prio)
	l.count++
	if e.sized {
		l.bytes += int64(e.size)
	} else {
		oq.unsized++
	}
	l.puts.add(e.Seq)
}

// removePut takes back what addPut (and a resolved size) added, for e,
// just removed from oq.entries.
func (oq *ovQueue) removePut(e *ovEntry) {
	l := oq.level(e.Prio)
	l.count--
	if e.sized {
		l.bytes -= int64(e.size)
	} else {
		oq.unsized--
	}
	l.puts.removed(func(seq uint64) bool {
		x := oq.entries[seq]
		return x != nil && x.Prio == e.Prio
	})
}

// noteUpdate indexes an update of an older entry; call it before u
// enters oq.upds.
func (oq *ovQueue) noteUpdate(u store.Update) {
	if _, again := oq.upds[u.Seq]; !again {
		oq.level(u.Prio).upds.add(u.Seq)
	}
}

// belowSize is the body size of a put's message that this overlay does not
// hold, if it is at hand: the body in the overlay below, or the batch's
// message.
func (o *overlay) belowSize(e *store.Entry) (uint32, bool) {
	var m *store.Message
	if o.below != nil {
		m = o.below.message(e.Msg.ID)
	}
	if m == nil && e.Msg.Body != nil { // nil: a stub from a replayed record
		m = e.Msg
	}
	if m == nil {
		return 0, false
	}
	return uint32(len(m.Body)), true
}

// countOlderDelete counts the delete of r, an entry older than this
// overlay, and records it in oq.dels.
func (o *overlay) countOlderDelete(oq *ovQueue, r store.Ref) {
	if m, again := oq.dels[r.Seq]; again {
		if !m.isPending() {
			oq.dels[r.Seq] = delMark(r.Prio) // counted already
		}
		return
	}
	if oq.dropped {
		oq.dels[r.Seq] = delMark(r.Prio) // the drop removed it
		return
	}
	oq.level(r.Prio).dels.add(r.Seq)
	size, exists, known := o.belowEntry(r)
	mark := delMark(r.Prio)
	switch {
	case !known:
		oq.level(r.Prio).count--
		mark |= delPending
		oq.pending++
	case exists:
		d := oq.level(r.Prio)
		d.count--
		d.bytes -= int64(size)
	}
	oq.dels[r.Seq] = mark
}

// belowEntry looks r up in the frozen overlay under o. known is false when
// the answer is in the index, or the entry is there but not its size.
func (o *overlay) belowEntry(r store.Ref) (size uint32, exists, known bool) {
	if o.below == nil {
		return 0, false, false
	}
	bq := o.below.queues[r.Queue]
	if bq == nil {
		return 0, false, false
	}
	if e := bq.entries[r.Seq]; e != nil {
		if e.Prio != r.Prio {
			return 0, false, true // the index has no such key either
		}
		return e.size, true, e.sized
	}
	if bq.dropped {
		return 0, false, true
	}
	if _, ok := bq.dels[r.Seq]; ok {
		return 0, false, true
	}
	return 0, false, false
}

// ---- Queues ----

// queueDelta is one overlay's change to one queue, copied under mu.
type queueDelta struct {
	q       store.QueueID
	dropped bool
	lastSeq uint64
	levels  []store.LevelState // deltas, unordered
	pending []store.Ref        // deletes of older entries whose size is pending
	unsized []unsizedPut
}

type unsizedPut struct {
	e   *ovEntry // identity only: compared under mu when writing back
	ref store.Ref
	msg store.MsgID
}

// capture copies o's changes to every queue. Call with mu held.
func (o *overlay) capture() []queueDelta {
	out := make([]queueDelta, 0, len(o.queues))
	for q, oq := range o.queues {
		d := queueDelta{q: q, dropped: oq.dropped, lastSeq: oq.lastSeq}
		for prio, l := range oq.levels {
			if l.count != 0 || l.bytes != 0 {
				d.levels = append(d.levels, store.LevelState{Prio: prio, Count: l.count, Bytes: l.bytes})
			}
		}
		if oq.pending > 0 {
			for seq, m := range oq.dels {
				if m.isPending() {
					d.pending = append(d.pending, store.Ref{Queue: q, Prio: m.prio(), Seq: seq})
				}
			}
		}
		if oq.unsized > 0 {
			for _, e := range oq.entries {
				if !e.sized {
					d.unsized = append(d.unsized, unsizedPut{e: e, ref: e.Ref, msg: e.Msg.ID})
				}
			}
		}
		if d.dropped || d.lastSeq > 0 || len(d.levels) > 0 || len(d.pending) > 0 || len(d.unsized) > 0 {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b queueDelta) int { return cmp.Compare(a.q, b.q) })
	return out
}

// snapView is what a counting or window read sees: an index snapshot and
// the overlays as they were when it was taken (under mu). frozen is nil
// when there was none or the snapshot already holds its checkpoint (the
// checkpoint commits before it lets go of the frozen overlay).
type snapView struct {
	s      *Store
	snap   *pebble.Snapshot
	frozen *overlay
	active *overlay
	key    []byte
}

// newSnapView takes the snapshot; call with mu held and then finish it
// with settle after releasing mu.
func (s *Store) newSnapView() *snapView {
	return &snapView{s: s, snap: s.db.NewSnapshot(), frozen: s.frozen, active: s.active}
}

// settle drops the frozen overlay from the view if the snapshot already
// holds its checkpoint: applying it again would count it twice.
func (v *snapView) settle() error {
	if v.frozen == nil {
		return nil
	}
	raw, closer, err := v.snap.Get(index.StateKey())
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read store state: %w", err)
	}
	var st index.StoreState
	err = index.DecodeStoreState(raw, &st)
	closer.Close()
	if err != nil {
		return fmt.Errorf("read store state: %w", err)
	}
	pos := st.CheckpointLSN
	if st.Position != 0 {
		pos = st.Position // a replicated store's
	}
	if pos >= v.frozen.last {
		v.frozen = nil
	}
	return nil
}

// olderEntry finds entry r as the layers under an overlay have it: the
// frozen overlay f (nil when r is looked up for the frozen overlay itself
// or there is none in the view), then the index snapshot.
func (v *snapView) olderEntry(f *overlay, r store.Ref) (size uint32, exists bool, err error) {
	if f != nil {
		if fq := f.queues[r.Queue]; fq != nil {
			if e := fq.entries[r.Seq]; e != nil && e.Prio == r.Prio {
				if e.sized {
					return e.size, true, nil
				}
				size, err := v.msgSize(e.Msg.ID)
				return size, true, err
			}
			if fq.dropped {
				return 0, false, nil
			}
			if _, ok := fq.dels[r.Seq]; ok {
				return 0, false, nil
			}
		}
	}
	v.key = index.EntryKey(v.key[:0], uint64(r.Queue), r.Prio, r.Seq)
	raw, closer, err := v.snap.Get(v.key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read entry %d/%d/%d: %w", r.Queue, r.Prio, r.Seq, err)
	}
	defer closer.Close()
	var ev index.EntryValue
	if err := index.DecodeEntryValue(raw, &ev); err != nil {
		return 0, false, fmt.Errorf("read entry %d/%d/%d: %w", r.Queue, r.Prio, r.Seq, err)
	}
	return ev.Size, true, nil
}

// msgSize is the body size of a message stored before the view's
// overlays (or in the frozen one). A message the index does not have
// counts 0, as the checkpoint would write it.
func (v *snapView) msgSize(id store.MsgID) (uint32, error) {
	if v.frozen != nil {
		if m := v.frozen.message(id); m != nil {
			return uint32(len(m.Body)), nil
		}
	}
	v.key = index.MsgKey(v.key[:0], uint64(id))
	raw, closer, err := v.snap.Get(v.key)
	if errors.Is(err, pebble.ErrNotFound) {
		v.s.log.Warn("queue counters: entry refers to a message the index does not have", "msg", id)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read message %d: %w", id, err)
	}
	defer closer.Close()
	var mv index.MsgValue
	if err := index.DecodeMsgValue(raw, &mv); err != nil {
		return 0, fmt.Errorf("read message %d: %w", id, err)
	}
	return mv.Size, nil
}

// resolved is a pending size read from the index, to write back into the
// active overlay.
type resolved struct {
	ref    store.Ref
	size   uint32
	exists bool
	put    *ovEntry // nil: a delete
}

// resolve reads the pending sizes of ds, one overlay's deltas, and adds
// them to ds' levels. under is the frozen overlay below it (nil for the
// frozen overlay itself). It returns what it read when keep is set.
func (v *snapView) resolve(ds []queueDelta, under *overlay, keep bool) ([]resolved, error) {
	var out []resolved
	for i := range ds {
		d := &ds[i]
		for _, r := range d.pending {
			size, exists, err := v.olderEntry(under, r)
			if err != nil {
				return nil, err
			}
			if exists {
				addLevel(&d.levels, r.Prio, 0, -int64(size))
			} else {
				addLevel(&d.levels, r.Prio, +1, 0) // the delete counted -1 for nothing
			}
			if keep {
				out = append(out, resolved{ref: r, size: size, exists: exists})
			}
		}
		for _, u := range d.unsized {
			size, err := v.msgSize(u.msg)
			if err != nil {
				return nil, err
			}
			addLevel(&d.levels, u.ref.Prio, 0, int64(size))
			if keep {
				out = append(out, resolved{ref: u.ref, size: size, exists: true, put: u.e})
			}
		}
	}
	return out, nil
}

// keepResolved writes sizes read by resolve back into o, if o is still
// the active overlay and the changes are still pending in it.
func (s *Store) keepResolved(o *overlay, rs []resolved) {
	if len(rs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active != o {
		return // frozen meanwhile: read-only now
	}
	for _, r := range rs {
		oq := o.queues[r.ref.Queue]
		if oq == nil {
			continue
		}
		if r.put != nil {
			if e := oq.entries[r.ref.Seq]; e == r.put && !e.sized {
				e.size, e.sized = r.size, true
				oq.unsized--
				oq.level(e.Prio).bytes += int64(r.size)
			}
			continue
		}
		if m, ok := oq.dels[r.ref.Seq]; ok && m.isPending() && m.prio() == r.ref.Prio {
			oq.dels[r.ref.Seq] = m &^ delPending
			oq.pending--
			d := oq.level(m.prio())
			if r.exists {
				d.bytes -= int64(r.size)
			} else {
				d.count++
			}
		}
	}
}

// addLevel adds (count, bytes) to level prio of ls.
func addLevel(ls *[]store.LevelState, prio uint8, count, bytes int64) {
	for i := range *ls {
		if (*ls)[i].Prio == prio {
			(*ls)[i].Count += count
			(*ls)[i].Bytes += bytes
			return
		}
	}
	*ls = append(*ls, store.LevelState{Prio: prio, Count: count, Bytes: bytes})
}

// applyDelta changes st by one overlay's delta.
func applyDelta(st *store.QueueState, d *queueDelta) {
	if d.dropped {
		st.LastSeq, st.Levels = 0, st.Levels[:0]
	}
	st.LastSeq = max(st.LastSeq, d.lastSeq)
	for _, l := range d.levels {
		addLevel(&st.Levels, l.Prio, l.Count, l.Bytes)
	}
}

// tidy drops empty levels and orders the rest by priority.
func tidy(st *store.QueueState) {
	st.Levels = slices.DeleteFunc(st.Levels, func(l store.LevelState) bool { return l.Count == 0 && l.Bytes == 0 })
	slices.SortFunc(st.Levels, func(a, b store.LevelState) int { return cmp.Compare(a.Prio, b.Prio) })
	if len(st.Levels) == 0 {
		st.Levels = nil
	}
}

func fromIndexState(st *index.QueueState) store.QueueState {
	out := store.QueueState{LastSeq: st.LastSeq}
	if len(st.Levels) > 0 {
		out.Levels = make([]store.LevelState, len(st.Levels))
		for i, l := range st.Levels {
			out.Levels[i] = store.LevelState{Prio: l.Prio, Count: int64(l.Count), Bytes: int64(l.Bytes)}
		}
	}
	return out
}

// Queues implements store.Store: the index's queue states as of the last
// checkpoint plus the overlays' deltas. Cost: O(queues + the overlays'
// queues and levels + pending sizes), see above.
func (s *Store) Queues(fn func(store.QueueID, store.QueueState) bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	v := s.newSnapView()
	var frozen []queueDelta
	if v.frozen != nil {
		frozen = v.frozen.capture()
	}
	active := v.active.capture()
	s.mu.Unlock()
	defer func() {
		if v.snap != nil {
			v.snap.Close()
		}
	}()

	if err := v.settle(); err != nil {
		return err
	}
	var layers [][]queueDelta // oldest first
	if v.frozen != nil {
		if _, err := v.resolve(frozen, nil, false); err != nil {
			return fmt.Errorf("list queues: %w", err)
		}
		layers = append(layers, frozen)
	}
	rs, err := v.resolve(active, v.frozen, true)
	if err != nil {
		return fmt.Errorf("list queues: %w", err)
	}
	layers = append(layers, active)
	s.keepResolved(v.active, rs)

	// Merge the index's states with the overlays' deltas, in queue order.
	type qstate struct {
		q  store.QueueID
		st store.QueueState
	}
	var out []qstate
	next := make([]int, len(layers)) // per layer: its next delta
	overlayNext := func() (store.QueueID, bool) {
		var min store.QueueID
		found := false
		for i, ds := range layers {
			if next[i] < len(ds) && (!found || ds[next[i]].q < min) {
				min, found = ds[next[i]].q, true
			}
		}
		return min, found
	}
	emit := func(q store.QueueID, st store.QueueState) {
		for i, ds := range layers {
			if next[i] < len(ds) && ds[next[i]].q == q {
				applyDelta(&st, &ds[next[i]])
				next[i]++
			}
		}
		tidy(&st)
		if st.LastSeq > 0 || len(st.Levels) > 0 {
			out = append(out, qstate{q, st})
		}
	}
	lo, hi := index.QueueStateBounds()
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	var ist index.QueueState
	for it.First(); it.Valid(); it.Next() {
		q64, err := index.DecodeQueueStateKey(it.Key())
		if err == nil {
			err = index.DecodeQueueState(it.Value(), &ist)
		}
		if err != nil {
			it.Close()
			return fmt.Errorf("list queues: %w", err)
		}
		q := store.QueueID(q64)
		for {
			oq, ok := overlayNext()
			if !ok || oq >= q {
				break
			}
			emit(oq, store.QueueState{})
		}
		emit(q, fromIndexState(&ist))
	}
	if err := it.Close(); err != nil {
		return err
	}
	for {
		oq, ok := overlayNext()
		if !ok {
			break
		}
		emit(oq, store.QueueState{})
	}
	v.snap.Close()
	v.snap = nil
	for _, x := range out {
		if !fn(x.q, x.st) {
			break
		}
	}
	return nil
}

// upgradeQueueStates gives level counters to queue states written before
// they existed (index.QueueState version 1): it counts those queues'
// entries in the index once, at open, before the WAL is replayed over it.
func (s *Store) upgradeQueueStates() error {
	lo, hi := index.QueueStateBounds()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	old := make(map[store.QueueID]uint64)
	for it.First(); it.Valid(); it.Next() {
		if index.QueueStateHasLevels(it.Value()) {
			continue
		}
		q, err := index.DecodeQueueStateKey(it.Key())
		var st index.QueueState
		if err == nil {
			err = index.DecodeQueueState(it.Value(), &st)
		}
		if err != nil {
			it.Close()
			return fmt.Errorf("read queue states: %w", err)
		}
		old[store.QueueID(q)] = st.LastSeq
	}
	if err := it.Close(); err != nil {
		return err
	}
	if len(old) == 0 {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	var ev index.EntryValue
	entries := 0
	for q, last := range old {
		counts := make(map[uint8]*index.LevelState)
		lo, hi := index.QueueBounds(uint64(q))
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return err
		}
		for it.First(); it.Valid(); it.Next() {
			_, prio, _, err := index.DecodeEntryKey(it.Key())
			if err == nil {
				err = index.DecodeEntryValue(it.Value(), &ev)
			}
			if err != nil {
				it.Close()
				return fmt.Errorf("count queue %d: %w", q, err)
			}
			l := counts[prio]
			if l == nil {
				l = &index.LevelState{Prio: prio}
				counts[prio] = l
			}
			l.Count++
			l.Bytes += uint64(ev.Size)
			entries++
		}
		if err := it.Close(); err != nil {
			return err
		}
		st := index.QueueState{LastSeq: last}
		for _, l := range counts {
			st.Levels = append(st.Levels, *l)
		}
		slices.SortFunc(st.Levels, func(a, b index.LevelState) int { return cmp.Compare(a.Prio, b.Prio) })
		if err := b.Set(index.QueueStateKey(nil, uint64(q)), index.AppendQueueState(nil, &st), nil); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("commit counted queue states: %w", err)
	}
	s.log.Info("counted queue levels of an older index", "queues", len(old), "entries", entries)
	return nil
}

// ---- Checkpoint side ----

// queueCount is a queue's state as a checkpoint writes it: the index's,
// changed by what the checkpoint deletes and puts.
type queueCount struct {
	last    uint64
	levels  []store.LevelState
	existed bool // the index has a state to replace or delete
	changed bool
}

// startQueueState reads q's state from the index (none when the overlay
// dropped the queue) before the checkpoint changes it.
func (c *cpBatch) startQueueState(q store.QueueID, dropped bool) error {
	qc := &queueCount{changed: dropped}
	c.qs[q] = qc
	st, found, err := c.s.readQueueState(c.s.db, q)
	if err != nil {
		return err
	}
	qc.existed = found
	if !dropped {
		s := fromIndexState(&st)
		qc.last, qc.levels = s.LastSeq, s.Levels
	}
	return nil
}

// countQueue counts one entry the checkpoint deletes (d = -1) or puts
// (d = +1) with its body size.
func (c *cpBatch) countQueue(q store.QueueID, prio uint8, d int64, size uint32) {
	qc := c.qs[q]
	addLevel(&qc.levels, prio, d, d*int64(size))
	qc.changed = true
}

// writeQueueStates writes the new state of every queue of f whose state
// changed: LastSeq and the counters, or a delete when nothing is left.
func (c *cpBatch) writeQueueStates(f *overlay, qids []store.QueueID) error {
	for _, q := range qids {
		qc := c.qs[q]
		if last := f.queues[q].lastSeq; last > qc.last {
			qc.last, qc.changed = last, true
		}
		if !qc.changed {
			continue
		}
		st := index.QueueState{LastSeq: qc.last}
		slices.SortFunc(qc.levels, func(a, b store.LevelState) int { return cmp.Compare(a.Prio, b.Prio) })
		for _, l := range qc.levels {
			if l.Count < 0 || l.Bytes < 0 || (l.Count == 0 && l.Bytes != 0) {
				// Only a bug can get here: the index's counters and
				// entries disagree. Keep going with what can be stored.
				c.s.log.Warn("checkpoint: queue level counters out of range", "queue", q, "prio", l.Prio, "count", l.Count, "bytes", l.Bytes)
			}
			if l.Count <= 0 {
				continue
			}
			st.Levels = append(st.Levels, index.LevelState{Prio: l.Prio, Count: uint64(l.Count), Bytes: uint64(max(l.Bytes, 0))})
		}
		c.key = index.QueueStateKey(c.key[:0], uint64(q))
		var err error
		switch {
		case st.LastSeq > 0 || len(st.Levels) > 0:
			c.val = index.AppendQueueState(c.val[:0], &st)
			err = c.b.Set(c.key, c.val, nil)
		case qc.existed:
			err = c.b.Delete(c.key, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readQueueState reads q's state from r (the DB or a snapshot).
func (s *Store) readQueueState(r pebble.Reader, q store.QueueID) (index.QueueState, bool, error) {
	var st index.QueueState
	raw, closer, err := r.Get(index.QueueStateKey(nil, uint64(q)))
	if errors.Is(err, pebble.ErrNotFound) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("read queue %d state: %w", q, err)
	}
	defer closer.Close()
	if err := index.DecodeQueueState(raw, &st); err != nil {
		return st, false, fmt.Errorf("read queue %d state: %w", q, err)
	}
	return st, true, nil
}
