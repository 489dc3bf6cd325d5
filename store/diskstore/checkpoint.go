package diskstore

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/segment"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/wal"
)

// checkpointer is the state only the checkpoint goroutine touches (and
// Close, after that goroutine stopped).
type checkpointer struct {
	// segs is the live accounting of every segment, as the index has it.
	segs map[segment.ID]*index.SegmentState
	// orphans are segment files no committed checkpoint refers to (the
	// output of a checkpoint or compaction that failed, or dead segments
	// a checkpoint could not remove) still to be removed. Recovery
	// removes such files too.
	orphans []segment.ID
	// failing is the error of the last checkpoint attempt when it failed
	// (nil once one succeeds): the checkpoint goroutine retries it with
	// backoff, and the store's "checkpoint" alarm is raised meanwhile.
	failing error
	// fdsPlentyUntil: the last descriptor count found plenty free; no
	// checkpoint counts again before then (descriptorsFree).
	fdsPlentyUntil time.Time
	// damaged holds the segments a compaction found a damaged block in,
	// with the damage: never compacted again (compact.go).
	damaged map[segment.ID]string
	// keep is a replicated store's lowest WAL record its group's log
	// still needs, as the last checkpoint's Retain said (0: none).
	keep wal.LSN
	// afterFreeze and afterCommit, when set (by tests, under cpMu), run in
	// checkpoint with only cpMu held: once the active overlay is frozen,
	// and once the index batch committed but before the frozen overlay
	// is let go. Reads and Applies in them see the in-between states.
	afterFreeze, afterCommit func()
}

// forceCheckpoint has the checkpointer run a checkpoint now, full overlay
// or not (unless one failed and waits for its retry).
func (s *Store) forceCheckpoint() {
	s.force.Store(true)
	s.wake()
}

func (s *Store) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// checkpointLoop runs checkpoints when the active overlay is full or the
// interval passed, and compacts segments after them.
//
// A checkpoint that fails is retried, with a backoff that doubles from
// retryMin to retryMax, until one succeeds: until its index batch commits
// nothing of it counts, and the WAL still holds everything it would have
// moved (its files are removed only after the commit). The store stays
// usable meanwhile — the WAL takes records, reads see the frozen overlay —
// while the "checkpoint" alarm holds publishers back (Options.OnAlarm);
// Reserve bounds what the active overlay grows to. Only a WAL failure,
// which can mean lost records, fails the store for good.
func (s *Store) checkpointLoop() {
	defer close(s.stopped)
	t := time.NewTicker(s.opts.CheckpointInterval)
	defer t.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	var backoff time.Duration
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
			if backoff > 0 || !s.force.Swap(false) && !s.overlayFull() {
				continue // a failed checkpoint waits for its retry
			}
		case <-t.C:
			if backoff > 0 {
				continue
			}
		case <-retry.C:
		}
		err := s.checkpoint()
		if err == nil {
			if cerr := s.Compact(); cerr != nil {
				s.compactFailed(cerr)
			}
		}
		if werr := s.wal.Err(); werr != nil {
			s.fail(fmt.Errorf("checkpoint: %w", werr))
			backoff = 0
			continue
		}
		if s.checkpointOutcome(err) {
			backoff = min(max(2*backoff, retryMin), retryMax)
			retry.Reset(backoff)
		} else {
			backoff = 0
		}
		s.kickSpace() // it wrote, and may have given space back
	}
}

// Bounds of the backoff between checkpoint attempts after a failure.
const (
	retryMin = 50 * time.Millisecond
	retryMax = time.Second
)

// checkpointOutcome records how a checkpoint attempt ended, logs a
// failure (the first in full, then about once a minute while it lasts)
// and raises or clears the "checkpoint" alarm. It reports whether the
// attempt failed.
func (s *Store) checkpointOutcome(err error) bool {
	s.cpMu.Lock()
	was := s.cp.failing
	s.cp.failing = err
	s.cpMu.Unlock()
	n := s.cpFailures.Load()
	if err != nil {
		n = s.cpFailures.Add(1)
	}
	switch {
	case err != nil && was == nil:
		s.log.Error("checkpoint failed; retrying (the WAL keeps every change, publishers are held back until it succeeds)", "err", err)
		// The alarm holds publishers from now on; those Reserve holds
		// are let go (they would wait unseen, without the alarm's
		// connection.blocked) and meet the alarm at their next publish.
		s.alarm(AlarmCheckpoint, true)
		s.cpFailing.Store(true)
		s.checkpointEnded()
	case err != nil && s.failLog.allow():
		s.log.Error("checkpoint still failing; retrying", "err", err, "failed_attempts", n)
	case err == nil && was != nil:
		s.log.Info("checkpoint succeeded after failures", "failed_attempts", n)
		s.cpFailing.Store(false)
		s.alarm(AlarmCheckpoint, false)
	}
	return err != nil
}

// compactFailed logs a failed compaction. Compaction only gives disk
// space back; it is tried again after the next checkpoint.
func (s *Store) compactFailed(err error) {
	if s.failLog.allow() {
		s.log.Warn("segment compaction failed; retried after the next checkpoint", "err", err)
	}
}

// overlayFull reports whether the active overlay holds CheckpointBytes. A
// wake can be stale: Applies that found the overlay full before the
// checkpoint froze it each leave one, and the overlay after it has barely
// started.
func (s *Store) overlayFull() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	full := s.active.bytes >= s.opts.CheckpointBytes
	if !full && s.staleWake != nil {
		s.staleWake()
	}
	return full
}

// Checkpoint moves everything applied so far into segments and the index
// and removes the WAL files that held it. The store does this by itself
// in the background; tests and a clean shutdown call it to make the next
// start replay nothing. A failure is also handed to the background loop,
// which retries it as it retries its own.
func (s *Store) Checkpoint() error {
	s.mu.Lock()
	err := s.usableLocked()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.checkpoint(); err != nil {
		// Its frozen overlay waits for a retry: the loop makes it, with
		// the alarm and the backoff of its own failures.
		s.forceCheckpoint()
		return err
	}
	return nil
}

// checkpoint moves the active overlay into segments and the index and
// removes the WAL files it covered. cpMu makes it one at a time. When an
// earlier attempt failed, its frozen overlay is still there and is what
// this one writes; the active overlay waits for the next.
//
// A failure before the index batch commits leaves the store as it was
// (the segment files it wrote are removed) and the attempt can be made
// again; one after it (removing files the checkpoint made dead) is
// logged and left to the next checkpoint.
func (s *Store) checkpoint() error {
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	return s.checkpointLocked()
}

// checkpointLocked is checkpoint with cpMu held.
func (s *Store) checkpointLocked() (err error) {
	defer s.checkpointEnded() // also on failure: waiters then see the error
	start := time.Now()
	s.mu.Lock()
	idle := s.err != nil || s.frozen == nil && s.active.empty()
	s.mu.Unlock()
	if idle {
		return nil // nothing to move, or nothing more is written once the store failed
	}
	if err := s.descriptorsFree(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil
	}
	f := s.frozen
	if f == nil {
		f = s.active
		s.active = newOverlay()
		s.active.below = f
		s.frozen = f
		if s.rep != nil {
			// The frozen overlay ends at a proposal's end: its last
			// proposal takes no batch of the new active one.
			s.rep.sealLocked()
			f.walLast = uint64(s.wal.LastLSN())
			s.active.applied, s.active.appliedTerm, s.active.conf = f.applied, f.appliedTerm, f.conf
		}
	}
	nextID := s.nextID.Load()
	s.mu.Unlock()
	defer func() {
		if err == nil {
			s.cpDuration.Observe(time.Since(start).Seconds())
		}
	}()
	if s.cp.afterFreeze != nil {
		s.cp.afterFreeze()
	}
	if s.rep != nil && !s.awaitCommitted(f.lastProp) {
		// Its proposals will never commit here: the store failed (and
		// is abandoned), or closes.
		return nil
	}

	// Everything the index is about to hold must be durable in the WAL
	// first, or a crash could keep a change whose record was lost.
	if err := s.wal.Sync(); err != nil {
		return fmt.Errorf("sync wal: %w", err)
	}
	dead, err := s.writeCheckpoint(f, nextID)
	if err != nil {
		return err
	}
	if s.cp.afterCommit != nil {
		s.cp.afterCommit()
	}
	s.mu.Lock()
	s.frozen = nil
	s.active.below = nil // f's bodies may go; the index has its sizes now
	s.mu.Unlock()
	// The index no longer refers to the dead segments: from here on a
	// failure costs disk space until a later checkpoint, never data.
	s.cp.orphans = append(s.cp.orphans, dead...)
	s.removeOrphans()
	removeBefore := wal.LSN(f.last + 1)
	if s.rep != nil {
		removeBefore = wal.LSN(f.walLast + 1)
		if s.cp.keep != 0 {
			removeBefore = min(removeBefore, s.cp.keep)
		}
	}
	if err := s.wal.RemoveBefore(removeBefore); err != nil && s.wal.Err() == nil && s.failLog.allow() {
		s.log.Warn("could not remove checkpointed WAL files; retried after the next checkpoint", "err", err)
	}
	return nil
}

// checkpointFDs is the descriptors a checkpoint may need at once: a
// segment file and its directory, the index's new log file, the tables
// its flush and a compaction write, their directory and manifest, with
// room to spare.
const checkpointFDs = 32

// descriptorsFree returns an error matching syscall.EMFILE when fewer
// than checkpointFDs descriptors are free (Options.FreeDescriptors). A
// count costs a directory read of every open descriptor, so after one
// that found plenty free the next second's checkpoints do not count again.
// Under cpMu.
func (s *Store) descriptorsFree() error {
	if s.opts.FreeDescriptors == nil {
		return nil
	}
	now := time.Now()
	if now.Before(s.cp.fdsPlentyUntil) {
		return nil
	}
	free, err := s.opts.FreeDescriptors()
	if err != nil {
		return nil // unknown: the checkpoint finds out
	}
	if free >= 8*checkpointFDs {
		s.cp.fdsPlentyUntil = now.Add(time.Second)
	}
	if free >= checkpointFDs {
		return nil
	}
	return fmt.Errorf("%d file descriptors free, a checkpoint may need %d: %w", free, checkpointFDs, syscall.EMFILE)
}

// cpBatch is one checkpoint's index batch under construction.
type cpBatch struct {
	s     *Store
	b     *pebble.Batch
	pr    *pointReader // live-index lookups of older entries (getEntry)
	key   []byte
	val   []byte
	delta map[store.MsgID]int                // reference changes of messages already in the index
	segs  map[segment.ID]*index.SegmentState // segments whose accounting changed
	qs    map[store.QueueID]*queueCount      // new state of the overlay's queues (queues.go)
	// written are the segments this checkpoint wrote: removed again if
	// it fails before its batch commits.
	written []segment.ID
}

func (c *cpBatch) seg(id segment.ID) *index.SegmentState {
	st := c.segs[id]
	if st == nil {
		st = new(index.SegmentState)
		if old := c.s.cp.segs[id]; old != nil {
			*st = *old
		}
		c.segs[id] = st
	}
	return st
}

// getEntry reads an entry as the index has it, through c.pr: callers go
// in key order.
func (c *cpBatch) getEntry(q store.QueueID, prio uint8, seq uint64, v *index.EntryValue) (bool, error) {
	c.key = index.EntryKey(c.key[:0], uint64(q), prio, seq)
	raw, ok, err := c.pr.get(c.key)
	if err != nil {
		return false, fmt.Errorf("read entry %d/%d/%d: %w", q, prio, seq, err)
	}
	if !ok {
		return false, nil
	}
	// The decoded value may alias raw; keep copies of what outlives it.
	if err := index.DecodeEntryValue(slices.Clone(raw), v); err != nil {
		return false, fmt.Errorf("read entry %d/%d/%d: %w", q, prio, seq, err)
	}
	return true, nil
}

// dropEntry deletes an index entry and its expiry key and counts the
// reference it held.
func (c *cpBatch) dropEntry(q store.QueueID, prio uint8, seq uint64, v *index.EntryValue) error {
	c.key = index.EntryKey(c.key[:0], uint64(q), prio, seq)
	if err := c.b.Delete(c.key, nil); err != nil {
		return err
	}
	if v.Deadline != 0 {
		c.key = index.ExpiryKey(c.key[:0], v.Deadline, uint64(q), prio, seq)
		if err := c.b.Delete(c.key, nil); err != nil {
			return err
		}
	}
	c.delta[store.MsgID(v.Msg)]--
	return nil
}

func (c *cpBatch) putEntry(e *store.Entry, size uint32) error {
	v := index.EntryValue{
		Msg:           uint64(e.Msg.ID),
		Size:          size,
		Deadline:      e.Deadline,
		DeliveryCount: e.DeliveryCount,
		AcquiredCount: e.AcquiredCount,
		ReadyAt:       e.ReadyAt,
		DeadLetter:    []byte(e.DeadLetter),
		DeadAt:        e.DeadAt,
		Origin:        originToIndex(e.Origin),
	}
	if h := e.Header; h != nil {
		ih := &index.Header{Exchange: []byte(h.Exchange), Props: h.Props}
		for _, k := range h.RoutingKeys {
			ih.RoutingKeys = append(ih.RoutingKeys, []byte(k))
		}
		v.Header = ih
	}
	c.key = index.EntryKey(c.key[:0], uint64(e.Queue), e.Prio, e.Seq)
	c.val = index.AppendEntryValue(c.val[:0], &v)
	if err := c.b.Set(c.key, c.val, nil); err != nil {
		return err
	}
	if e.Deadline != 0 {
		c.key = index.ExpiryKey(c.key[:0], e.Deadline, uint64(e.Queue), e.Prio, e.Seq)
		return c.b.Set(c.key, nil, nil)
	}
	return nil
}

// writeCheckpoint writes frozen overlay f: new bodies into a segment,
// entries, deletes, definitions and accounting into one synced index
// batch. It returns the segments that no longer hold a live message.
func (s *Store) writeCheckpoint(f *overlay, nextID uint64) (dead []segment.ID, err error) {
	c := &cpBatch{
		s:     s,
		b:     s.db.NewBatch(),
		delta: make(map[store.MsgID]int),
		segs:  make(map[segment.ID]*index.SegmentState),
		qs:    make(map[store.QueueID]*queueCount),
	}
	defer c.b.Close()
	defer func() {
		if err != nil {
			// Nothing refers to what it wrote: the attempt is abandoned
			// and the next one writes the overlay again.
			s.cp.orphans = append(s.cp.orphans, c.written...)
			s.removeOrphans()
		}
	}()
	for id, d := range f.older {
		c.delta[id] += d
	}

	// Queues: drops, deletes and updates of older entries, then puts.
	qids := make([]store.QueueID, 0, len(f.queues))
	for q := range f.queues {
		qids = append(qids, q)
	}
	slices.Sort(qids)
	var ev index.EntryValue
	pr, err := s.newPointReader()
	if err != nil {
		return nil, err
	}
	defer pr.close()
	c.pr = pr
	var refs []store.Ref
	for _, q := range qids {
		oq := f.queues[q]
		if err := c.startQueueState(q, oq.dropped); err != nil {
			return nil, err
		}
		if oq.dropped {
			if err := c.dropQueue(q); err != nil {
				return nil, err
			}
			// Deletes and updates the overlay holds after a drop name
			// entries the drop removed: nothing is left to change.
			continue
		}
		// Deletes, then updates, in key order (one sweep of c.pr each).
		refs = refs[:0]
		for seq, m := range oq.dels {
			refs = append(refs, store.Ref{Queue: q, Prio: m.prio(), Seq: seq})
		}
		sortRefs(refs)
		for _, r := range refs {
			prio, seq := r.Prio, r.Seq
			ok, err := c.getEntry(q, prio, seq, &ev)
			if err != nil {
				return nil, err
			}
			if !ok {
				s.log.Warn("checkpoint: delete of an entry the index does not have", "queue", q, "prio", prio, "seq", seq)
				continue
			}
			if err := c.dropEntry(q, prio, seq, &ev); err != nil {
				return nil, err
			}
			c.countQueue(q, prio, -1, ev.Size)
		}
		refs = refs[:0]
		for seq, u := range oq.upds {
			refs = append(refs, store.Ref{Queue: q, Prio: u.Prio, Seq: seq})
		}
		sortRefs(refs)
		for _, r := range refs {
			seq, u := r.Seq, oq.upds[r.Seq]
			ok, err := c.getEntry(q, u.Prio, seq, &ev)
			if err != nil {
				return nil, err
			}
			if !ok {
				s.log.Warn("checkpoint: update of an entry the index does not have", "queue", q, "prio", u.Prio, "seq", seq)
				continue
			}
			ev.DeliveryCount, ev.AcquiredCount, ev.ReadyAt = u.DeliveryCount, u.AcquiredCount, u.ReadyAt
			ev.DeadLetter, ev.DeadAt = []byte(u.DeadLetter), u.DeadAt
			c.key = index.EntryKey(c.key[:0], uint64(q), u.Prio, seq)
			c.val = index.AppendEntryValue(c.val[:0], &ev)
			if err := c.b.Set(c.key, c.val, nil); err != nil {
				return nil, err
			}
		}
	}

	// New bodies still referred to go to a segment; the rest (published
	// and settled within this interval) are never written again.
	if err := c.writeMessages(f); err != nil {
		return nil, err
	}
	// Entries put in this interval and still live.
	for _, q := range qids {
		for _, e := range f.queues[q].entries {
			size := e.size
			if !e.sized {
				var err error
				if size, err = c.bodySize(f, &e.Entry); err != nil {
					return nil, err
				}
			}
			if err := c.putEntry(&e.Entry, size); err != nil {
				return nil, err
			}
			c.countQueue(q, e.Prio, +1, size)
		}
	}
	// Queue states: counters as the index now holds them, and LastSeq.
	if err := c.writeQueueStates(f, qids); err != nil {
		return nil, err
	}
	// Reference changes of messages stored before this interval.
	if err := c.applyDeltas(); err != nil {
		return nil, err
	}
	// Definitions.
	for k, v := range f.meta {
		c.key = index.MetaKey(c.key[:0], []byte(k))
		var err error
		if v == nil {
			err = c.b.Delete(c.key, nil)
		} else {
			err = c.b.Set(c.key, v, nil)
		}
		if err != nil {
			return nil, err
		}
	}
	// Segment accounting, and the checkpoint mark itself.
	for id, st := range c.segs {
		c.key = index.SegmentKey(c.key[:0], uint32(id))
		var err error
		if st.LiveMsgs <= 0 {
			dead = append(dead, id)
			err = c.b.Delete(c.key, nil)
		} else {
			c.val = index.AppendSegmentState(c.val[:0], st)
			err = c.b.Set(c.key, c.val, nil)
		}
		if err != nil {
			return nil, err
		}
	}
	state := index.StoreState{CheckpointLSN: f.last, NextMsgID: nextID}
	if s.rep != nil {
		state = index.StoreState{CheckpointLSN: f.walLast, NextMsgID: nextID, Position: max(f.last, 1)}
		gs := index.GroupState{Applied: f.applied, AppliedTerm: f.appliedTerm, ConfState: f.conf}
		var keep wal.LSN
		gs.Compacted, gs.CompactedTerm, keep = s.opts.Replication.Log.Retain(f.applied, f.appliedTerm)
		if gs.Compacted > gs.Applied {
			return nil, fmt.Errorf("the group's log compacted to %d, above the applied %d", gs.Compacted, gs.Applied)
		}
		s.cp.keep = keep
		c.val = index.AppendGroupState(c.val[:0], &gs)
		if err := c.b.Set(index.GroupStateKey(nil, s.opts.Replication.Group), c.val, nil); err != nil {
			return nil, err
		}
	}
	c.val = index.AppendStoreState(c.val[:0], &state)
	if err := c.b.Set(index.StateKey(), c.val, nil); err != nil {
		return nil, err
	}
	if err := s.indexRoom(c.b.Len()); err != nil {
		return nil, err
	}
	if err := c.b.Commit(pebble.Sync); err != nil {
		return nil, fmt.Errorf("commit index batch: %w", err)
	}
	for id, st := range c.segs {
		if st.LiveMsgs <= 0 {
			delete(s.cp.segs, id)
		} else {
			s.cp.segs[id] = st
		}
	}
	slices.Sort(dead)
	return dead, nil
}

// bodySize is the body length of e's message.
func (c *cpBatch) bodySize(f *overlay, e *store.Entry) (uint32, error) {
	if m := f.message(e.Msg.ID); m != nil {
		return uint32(len(m.Body)), nil
	}
	if e.Msg.Body != nil {
		return uint32(len(e.Msg.Body)), nil
	}
	mv, ok, err := c.pr.msgValue(e.Msg.ID, c.key)
	if err != nil || !ok {
		return 0, err
	}
	return mv.Size, nil
}

// writeMessages appends the bodies of f's live new messages to a segment.
func (c *cpBatch) writeMessages(f *overlay) error {
	ids := make([]store.MsgID, 0, len(f.msgs))
	for id, om := range f.msgs {
		if om.refs > 0 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	w, err := c.s.segs.NewWriter()
	if err != nil {
		return fmt.Errorf("start segment writer: %w", err)
	}
	defer func() { c.written = w.Segments() }()
	var blob []byte
	type written struct {
		id  store.MsgID
		loc segment.Loc
	}
	out := make([]written, 0, len(ids))
	for _, id := range ids {
		blob = encodeBlob(blob[:0], f.msgs[id].m)
		loc, err := w.Add(blob)
		if err != nil {
			w.Abort()
			return fmt.Errorf("write segment: %w", err)
		}
		out = append(out, written{id, loc})
	}
	if err := w.Finish(); err != nil {
		return fmt.Errorf("finish segment: %w", err)
	}
	for _, x := range out {
		om := f.msgs[x.id]
		st := c.seg(x.loc.Seg)
		st.LiveMsgs++
		st.LiveBytes += int64(x.loc.Len)
		st.TotalBytes += int64(x.loc.Len)
		c.key = index.MsgKey(c.key[:0], uint64(x.id))
		c.val = index.AppendMsgValue(c.val[:0], &index.MsgValue{Refs: uint32(om.refs), Size: uint32(len(om.m.Body)), Loc: segment.AppendLoc(nil, x.loc)})
		if err := c.b.Set(c.key, c.val, nil); err != nil {
			return err
		}
	}
	return nil
}

// applyDeltas writes the reference changes of messages already in the
// index; one whose count drops to zero is deleted and its bytes leave its
// segment's live count.
func (c *cpBatch) applyDeltas() error {
	ids := make([]store.MsgID, 0, len(c.delta))
	for id, d := range c.delta {
		if d != 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		mv, ok, err := c.pr.msgValue(id, c.key)
		if err != nil {
			return err
		}
		if !ok {
			c.s.log.Warn("checkpoint: reference change of a message the index does not have", "msg", id, "delta", c.delta[id])
			continue
		}
		refs := int64(mv.Refs) + int64(c.delta[id])
		c.key = index.MsgKey(c.key[:0], uint64(id))
		if refs > 0 {
			mv.Refs = uint32(refs)
			c.val = index.AppendMsgValue(c.val[:0], &mv)
			if err := c.b.Set(c.key, c.val, nil); err != nil {
				return err
			}
			continue
		}
		if err := c.b.Delete(c.key, nil); err != nil {
			return err
		}
		loc, err := segment.DecodeLoc(mv.Loc)
		if err != nil {
			return fmt.Errorf("message %d location: %w", id, err)
		}
		st := c.seg(loc.Seg)
		st.LiveMsgs--
		st.LiveBytes -= int64(loc.Len)
	}
	return nil
}

// dropQueue deletes every index entry of q, counting the references they
// held. It walks the queue once, in the background.
func (c *cpBatch) dropQueue(q store.QueueID) error {
	lo, hi := index.QueueBounds(uint64(q))
	it, err := c.s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	var ev index.EntryValue
	for it.First(); it.Valid(); it.Next() {
		_, prio, seq, err := index.DecodeEntryKey(it.Key())
		if err != nil {
			it.Close()
			return err
		}
		if err := index.DecodeEntryValue(slices.Clone(it.Value()), &ev); err != nil {
			it.Close()
			return err
		}
		if ev.Deadline != 0 {
			c.key = index.ExpiryKey(c.key[:0], ev.Deadline, uint64(q), prio, seq)
			if err := c.b.Delete(c.key, nil); err != nil {
				it.Close()
				return err
			}
		}
		c.delta[store.MsgID(ev.Msg)]--
	}
	if err := it.Close(); err != nil {
		return err
	}
	return c.b.DeleteRange(lo, hi, nil)
}

// removeOrphans removes the segment files in cp.orphans; those it cannot
// remove stay there for the next call. The index no longer refers to
// them, but a read that looked a location up before the commit may still
// be reading one: segMu waits for it.
func (s *Store) removeOrphans() {
	if len(s.cp.orphans) == 0 {
		return
	}
	s.segMu.Lock()
	defer s.segMu.Unlock()
	left := s.cp.orphans[:0]
	for _, id := range s.cp.orphans {
		err := s.segs.Remove(id)
		if err == nil || errors.Is(err, segment.ErrNotFound) {
			continue
		}
		if errors.Is(err, segment.ErrClosed) {
			return // recovery removes them
		}
		left = append(left, id)
		if s.failLog.allow() {
			s.log.Warn("could not remove a segment file nothing refers to; retried after the next checkpoint", "segment", id, "err", err)
		}
	}
	s.cp.orphans = left
}

// sortRefs sorts refs of one queue in index key order.
func sortRefs(refs []store.Ref) {
	slices.SortFunc(refs, func(a, b store.Ref) int { return cmp.Or(cmp.Compare(a.Prio, b.Prio), cmp.Compare(a.Seq, b.Seq)) })
}
