package diskstore

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/segment"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/wal"
)

// recover opens the index, the segments and the WAL, and replays the WAL
// records after the last checkpoint into the active overlay. Its cost
// grows with the WAL's length (bounded by CheckpointBytes) and the number
// of segments, not with the number of stored messages.
func (s *Store) recover(dir string) error {
	o := s.opts
	if err := s.verifyIndex(subdir(dir, "index")); err != nil {
		return err
	}
	io := index.Options(o.FS, o.IndexCacheBytes)
	io.MaxOpenFiles = max(o.MaxOpenFiles/2, pebbleMinOpenFiles)
	// Damage a read or compaction meets later fails the store, with the
	// file named; it never takes the process down (index.Options).
	index.OnCorruption(io, func(ce *index.CorruptionError) { go s.fail(ce) })
	db, err := pebble.Open(subdir(dir, "index"), io)
	if err != nil {
		return fmt.Errorf("open index: %w", index.FromPebble(subdir(dir, "index"), err))
	}
	s.db = db
	var st index.StoreState
	raw, closer, err := db.Get(index.StateKey())
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return fmt.Errorf("read store state: %w", err)
	default:
		derr := index.DecodeStoreState(slices.Clone(raw), &st)
		closer.Close()
		if derr != nil {
			return fmt.Errorf("read store state: %w", derr)
		}
	}
	s.nextID.Store(st.NextMsgID)
	if s.rep != nil {
		if err := s.recoverGroupState(&st); err != nil {
			return err
		}
	}
	if err := s.upgradeQueueStates(); err != nil {
		return err
	}

	if err := s.openSegments(dir); err != nil {
		return err
	}

	wo := wal.Options{
		FS:           o.FS,
		SegmentSize:  o.WALSegmentSize,
		Sync:         o.Sync,
		SyncInterval: o.SyncInterval,
		Logger:       s.log,
		AfterGroup:   s.runAfterGroup,
		OnStall:      s.walStalled,
		// Damage in records the index holds already costs nothing:
		// the WAL steps over it instead of refusing to open.
		Covered: wal.LSN(st.CheckpointLSN),
	}
	if s.rep != nil {
		// The records under the checkpoint hold the group's log too:
		// damage in them is not stepped over.
		wo.Covered = 0
	}
	w, err := wal.Open(subdir(dir, "wal"), wo)
	if err != nil {
		return fmt.Errorf("open wal: %w", err)
	}
	s.wal = w
	if w.LastLSN() < wal.LSN(st.CheckpointLSN) {
		// The checkpoint covers records the WAL no longer has and never
		// removed itself (it keeps the file it writes): its files were
		// lost, and new records would reuse LSNs the index counts as
		// done.
		return fmt.Errorf("open wal: it ends at record %d but the index was checkpointed through %d: WAL files are missing", w.LastLSN(), st.CheckpointLSN)
	}
	replayed, skipped, replicated := 0, 0, 0
	progress := newReplayProgress(o.RecoveryProgress, uint64(st.CheckpointLSN), uint64(w.LastLSN()))
	var gaps []lsnRange // records a repair of damage dropped (skip records)
	from := wal.LSN(st.CheckpointLSN + 1)
	if s.rep != nil {
		// A replicated store's group log starts where the WAL does.
		from = min(from, w.FirstLSN())
	}
	prev := from - 1
	err = w.ReplayClasses(from, func(lsn wal.LSN, class wal.Class, rec []byte) error {
		if lsn != prev+1 {
			gaps = append(gaps, lsnRange{prev + 1, lsn - 1})
		}
		prev = lsn
		progress.at(uint64(lsn))
		r, err := decodeWALRecord(rec)
		if err != nil {
			if class == wal.Volatile {
				// Nothing of it is recovered anyway.
				s.log.Warn("skipping an undecodable volatile wal record", "lsn", lsn, "err", err)
				skipped++
				return nil
			}
			return fmt.Errorf("wal record %d: %w", lsn, err)
		}
		if err := r.checkClass(class); err != nil {
			// A record that contradicts itself is a bug or a foreign
			// file, whatever its class: nothing of it is guessed.
			return fmt.Errorf("wal record %d: %w", lsn, err)
		}
		if r.batch == nil { // an entry or a hard state
			replicated++
			return s.replayReplica(lsn, &r)
		}
		b := r.batch
		s.noteIDs(b)
		// The ids above are never handed out again; a Volatile
		// record's changes are not recovered (store.VolatileQueue).
		if class == wal.Volatile || s.rep != nil && uint64(lsn) <= st.CheckpointLSN {
			skipped++
			return nil
		}
		if s.rep != nil {
			return fmt.Errorf("wal record %d: a single node's batch in a replicated store's WAL", lsn)
		}
		withoutVolatile(b)
		s.active.apply(b, b.Messages, uint64(lsn))
		replayed++
		return nil
	})
	if err != nil {
		return fmt.Errorf("replay wal: %w", err)
	}
	if w.LastLSN() > prev {
		gaps = append(gaps, lsnRange{prev + 1, w.LastLSN()})
	}
	if len(gaps) > 0 && s.rep != nil {
		return fmt.Errorf("replay wal: records %d to %d are missing (dropped as damaged): the group's log has a hole", gaps[0].first, gaps[0].last)
	}
	if len(gaps) > 0 {
		if err := s.dropDangling(gaps); err != nil {
			return err
		}
	}
	progress.end()
	s.log.Info("store recovered", "dir", dir, "checkpoint_lsn", st.CheckpointLSN,
		"wal_records_replayed", replayed, "volatile_records_skipped", skipped,
		"replica_records_replayed", replicated, "segments", len(s.cp.segs))
	return nil
}

// recoverGroupState reads a replicated store's state from the index: its
// position, its group's applied entry and membership, and the start of
// its message ids (the group in their high bits).
func (s *Store) recoverGroupState(st *index.StoreState) error {
	r := s.rep
	if st.Position == 0 && st.CheckpointLSN != 0 {
		return errors.New("the directory holds a single node's store: a cluster node starts with an empty one (or its own)")
	}
	r.pos = st.Position
	if base := s.opts.Replication.Group << idGroupShift; s.nextID.Load() < base {
		s.nextID.Store(base)
	}
	gs, err := s.GroupState()
	if err != nil {
		return err
	}
	r.applied, r.appliedT, r.conf = gs.Applied, gs.AppliedTerm, gs.ConfState
	s.active.applied, s.active.appliedTerm, s.active.conf = gs.Applied, gs.AppliedTerm, gs.ConfState
	return nil
}

// dropVolatile drops every volatile queue a replicated store holds, and
// checkpoints: what this node held only for itself (as the leader) is gone
// before it applies another leader's entries, whose message ids may be
// ones it gave its own volatile messages.
func (s *Store) dropVolatile() error {
	var b store.Batch
	err := s.Queues(func(q store.QueueID, _ store.QueueState) bool {
		if q.Volatile() {
			b.DropQueues = append(b.DropQueues, q)
		}
		return true
	})
	if err != nil {
		return err
	}
	if len(b.DropQueues) == 0 {
		return nil
	}
	done := make(chan error, 1)
	s.Apply(&b, func(err error) { done <- err })
	if err := <-done; err != nil {
		return fmt.Errorf("drop volatile queues: %w", err)
	}
	return s.Checkpoint()
}

// pebbleMinOpenFiles is the fewest descriptors Pebble keeps open: its
// table cache holds at least 64 tables, besides 10 other files.
const pebbleMinOpenFiles = 74

// verifyIndex checks every block of the index's sstables before the store
// serves (index.Verify): a damaged one makes Open fail, naming the files,
// rather than the broker failing once it reads the block. A new store has
// no index yet.
func (s *Store) verifyIndex(dir string) error {
	if _, err := s.opts.FS.Stat(dir); err != nil {
		return nil
	}
	start := time.Now()
	reports, err := index.Verify(s.opts.FS, dir)
	if err != nil {
		return fmt.Errorf("verify index: %w", err)
	}
	var size uint64
	for _, r := range reports {
		size += r.Size
	}
	s.log.Info("index verified", "tables", len(reports), "bytes", size, "duration", time.Since(start))
	var errs []error
	for _, ce := range index.Damaged(reports) {
		errs = append(errs, ce)
	}
	if len(errs) > 0 {
		return fmt.Errorf("verify index: %w", errors.Join(errs...))
	}
	return nil
}

// openSegments opens the segment files and loads their accounting. A
// segment file the index does not know is the output of a checkpoint or
// compaction that did not commit: it holds nothing live and is removed. A
// segment the index knows but whose file is missing is corruption.
func (s *Store) openSegments(dir string) error {
	segs, err := segment.Open(subdir(dir, "segments"), segment.Options{FS: s.opts.FS, CacheBytes: s.opts.CacheBytes, Logger: s.log,
		MaxOpenFiles: max(s.opts.MaxOpenFiles/4, 16)})
	if err != nil {
		return fmt.Errorf("open segments: %w", err)
	}
	s.segs = segs
	s.cp.segs = make(map[segment.ID]*index.SegmentState)
	lo, hi := index.SegmentBounds()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		id, err := index.DecodeSegmentKey(it.Key())
		if err != nil {
			it.Close()
			return fmt.Errorf("read segment accounting: %w", err)
		}
		st := new(index.SegmentState)
		if err := index.DecodeSegmentState(slices.Clone(it.Value()), st); err != nil {
			it.Close()
			return fmt.Errorf("read segment %d accounting: %w", id, err)
		}
		s.cp.segs[segment.ID(id)] = st
	}
	if err := it.Close(); err != nil {
		return err
	}
	onDisk := make(map[segment.ID]bool)
	for _, si := range segs.List() {
		onDisk[si.ID] = true
		if s.cp.segs[si.ID] == nil {
			s.log.Info("removing segment left by an unfinished checkpoint", "segment", si.ID)
			if err := segs.Remove(si.ID); err != nil {
				return fmt.Errorf("remove orphan segment %d: %w", si.ID, err)
			}
		}
	}
	for id := range s.cp.segs {
		if !onDisk[id] {
			return fmt.Errorf("open segments: segment %d holds live messages but its file is missing", id)
		}
	}
	return nil
}

// replayProgress calls Options.RecoveryProgress at the start of a replay,
// at each whole percent of the records to replay and at the end. Used by
// the goroutine that runs recover only.
type replayProgress struct {
	fn          func(done, total uint64)
	from, total uint64 // the replay covers LSNs from+1 .. from+total
	pct         uint64 // the last percent reported
	started     bool
}

func newReplayProgress(fn func(done, total uint64), checkpoint, last uint64) *replayProgress {
	p := &replayProgress{fn: fn, from: checkpoint}
	if last > checkpoint {
		p.total = last - checkpoint
	}
	return p
}

// at reports the replay of record lsn about to start.
func (p *replayProgress) at(lsn uint64) {
	if p.fn == nil || p.total == 0 {
		return
	}
	done := min(lsn-p.from-1, p.total)
	pct := done * 100 / p.total
	if !p.started || pct > p.pct {
		p.started = true
		p.pct = pct
		p.fn(done, p.total)
	}
}

// end reports the replay finished.
func (p *replayProgress) end() {
	if p.fn != nil {
		p.fn(p.total, p.total)
	}
}

// lsnRange is a range of WAL records, first … last.
type lsnRange struct{ first, last wal.LSN }

// dropDangling runs after a replay that found records missing (gaps): a
// repair of damage dropped them (wal.Repair). The messages those records
// stored are lost, and a later record's entry that refers to one (a
// dead-lettered copy, a message put again) would refer to nothing: such
// entries are deleted, in a batch of their own, and logged as lost. Their
// other effects are gone with them: a publish, an ack (the message comes
// back), a definition change.
func (s *Store) dropDangling(gaps []lsnRange) error {
	var n uint64
	for _, g := range gaps {
		n += uint64(g.last - g.first + 1)
	}
	s.log.Error("store: WAL records after the checkpoint were dropped as damaged; what they did is lost",
		"records", n, "first_lsn", uint64(gaps[0].first), "last_lsn", uint64(gaps[len(gaps)-1].last))
	pr, err := s.newPointReader()
	if err != nil {
		return err
	}
	defer pr.close()
	// Entries whose message no record replayed stored: the index must
	// have it, or it was in a dropped record.
	type dangling struct {
		ref store.Ref
		msg store.MsgID
	}
	var found []dangling
	for q, oq := range s.active.queues {
		for _, e := range oq.entries {
			if e.om == nil && !q.Volatile() {
				found = append(found, dangling{e.Ref, e.Msg.ID})
			}
		}
	}
	slices.SortFunc(found, func(a, b dangling) int { return cmp.Compare(a.msg, b.msg) })
	var b store.Batch
	var key []byte
	for _, d := range found {
		key = index.MsgKey(key[:0], uint64(d.msg))
		_, ok, err := pr.get(key)
		if err != nil {
			return fmt.Errorf("read message %d: %w", d.msg, err)
		}
		if !ok {
			s.log.Error("store: dropping an entry whose message was in a dropped WAL record",
				"queue", uint64(d.ref.Queue), "seq", d.ref.Seq, "msg", uint64(d.msg))
			b.Deletes = append(b.Deletes, d.ref)
		}
	}
	if len(b.Deletes) == 0 {
		return nil
	}
	done := make(chan error, 1)
	s.Apply(&b, func(err error) { done <- err })
	if err := <-done; err != nil {
		return fmt.Errorf("drop entries lost with damaged WAL records: %w", err)
	}
	return nil
}
