package diskstore

// Snapshots of a replicated store: a consistent copy of its index and
// segments that another member of the group installs in place of its own
// store when it is too far behind for the log (doc.go, "Snapshots").

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/internal/fsutil"
	"github.com/brokerd/brokerd/segment"
	"github.com/brokerd/brokerd/wal"
)

// The directories an ingest goes through, in the store's directory:
// ingestTmp while it is built (removed by Open: the old store stands),
// ingestDone once it is complete (Open finishes moving it in).
const (
	ingestTmp  = "ingest.tmp"
	ingestDone = "ingest"
)

// ingestParts are the store's directories an ingest replaces, in the
// order it moves them in.
var ingestParts = []string{"index", "segments", "wal"}

// CreateSnapshot writes a snapshot of a replicated store into dir, which
// must not exist, on the store's file system: it checkpoints (waiting for
// the proposals the overlay holds to commit), then, with checkpoints and
// compactions held off, makes a consistent copy of the index (Pebble's
// checkpoint: its tables hard-linked) into dir/index and hard-links (or
// copies where links fail) the segment files the index refers to into
// dir/segments, and returns the group's state the copy holds: the applied
// entry, its term and the membership. Segment files are never written
// once finished (package segment), and the ones a snapshot links stay
// valid there after the store removes its own name for them.
//
// under, if set, runs once the copy is made, before checkpoints may run
// again, with the group's state: the caller records there what it needs
// of its log at that entry (a later checkpoint's Retain may drop it).
// On failure dir is removed. Safe for concurrent use; it may take as long
// as a checkpoint, and Close and Abandon wait for it.
func (s *Store) CreateSnapshot(dir string, under func(gs index.GroupState) error) (gs index.GroupState, err error) {
	if s.rep == nil {
		return gs, errors.New("diskstore: create snapshot: not a replicated store")
	}
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	usable := func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.usableLocked()
	}
	if err := usable(); err != nil {
		return gs, fmt.Errorf("create snapshot: %w", err)
	}
	if err := s.checkpointLocked(); err != nil {
		s.forceCheckpoint() // its frozen overlay waits for the loop's retry
		return gs, fmt.Errorf("create snapshot: %w", err)
	}
	// A checkpoint whose proposals could not commit writes nothing.
	if err := usable(); err != nil {
		return gs, fmt.Errorf("create snapshot: %w", err)
	}
	fs := s.opts.FS
	defer func() {
		if err != nil {
			fs.RemoveAll(dir)
		}
	}()
	if _, err := fs.Stat(dir); err == nil {
		return gs, fmt.Errorf("create snapshot: %s exists", dir)
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return gs, fmt.Errorf("create snapshot: %w", err)
	}
	if err := s.db.Checkpoint(subdir(dir, "index"), pebble.WithFlushedWAL()); err != nil {
		return gs, fmt.Errorf("create snapshot: copy the index: %w", err)
	}
	if gs, err = s.GroupState(); err != nil {
		return gs, fmt.Errorf("create snapshot: %w", err)
	}
	segs := subdir(dir, "segments")
	if err := fs.MkdirAll(segs, 0o755); err != nil {
		return gs, fmt.Errorf("create snapshot: %w", err)
	}
	ids := make([]segment.ID, 0, len(s.cp.segs))
	for id := range s.cp.segs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		name := segment.FileName(id)
		if err := vfs.LinkOrCopy(fs, filepath.Join(s.dir, "segments", name), filepath.Join(segs, name)); err != nil {
			return gs, fmt.Errorf("create snapshot: link segment %d: %w", id, err)
		}
	}
	if err := fsutil.SyncDir(fs, segs); err != nil {
		return gs, fmt.Errorf("create snapshot: %w", err)
	}
	if err := fsutil.SyncDir(fs, dir); err != nil {
		return gs, fmt.Errorf("create snapshot: %w", err)
	}
	if under != nil {
		if err := under(gs); err != nil {
			return gs, fmt.Errorf("create snapshot: %w", err)
		}
	}
	return gs, nil
}

// IngestState is what IngestSnapshot writes into the new store's WAL: the
// start of the group's Raft log and the member's hard state.
type IngestState struct {
	// Log is the group's entries the new log starts with (in index order,
	// ending at the snapshot's applied entry), or none; PrevTerm is the
	// term of the entry before the first. Entries kept from before the
	// snapshot let the member know what the last applied proposal was.
	Log      []LogEntry
	PrevTerm uint64
	// HardState is the member's: its term and vote as they were (they
	// must survive), its commit the snapshot's applied entry.
	HardState HardState
}

// IngestSnapshot replaces the replicated store in dir, which must be
// closed, with the snapshot in snapDir (CreateSnapshot's output, whole;
// on dir's file system, whose index and segments directories it moves,
// not copies): the new store holds exactly the snapshot's state, its
// group's log starts with st.Log (or right after the snapshot's applied
// entry) and its WAL holds those entries and st.HardState. opts are the
// store's (Replication.Group, FS, WALSegmentSize).
//
// A crash at any point leaves the old store or the new one, never a mix:
// the new store is built in dir/ingest.tmp (which Open removes) and fsync'd,
// then renamed to dir/ingest, the commit point, after which Open moves its
// parts into place (finishIngest) if this call did not get to.
func IngestSnapshot(dir, snapDir string, opts Options, st IngestState) error {
	opts = opts.withDefaults()
	if opts.Replication == nil {
		return errors.New("diskstore: ingest snapshot: not a replicated store's options")
	}
	group := opts.Replication.Group
	fs := opts.FS
	wrap := func(err error) error { return fmt.Errorf("diskstore: ingest snapshot into %s: %w", dir, err) }
	for i, e := range st.Log {
		if e.Group != group || i > 0 && e.Index != st.Log[i-1].Index+1 {
			return wrap(fmt.Errorf("log entry %d of group %d out of place", e.Index, e.Group))
		}
	}
	if st.HardState.Group != group {
		return wrap(fmt.Errorf("a hard state of group %d", st.HardState.Group))
	}
	// An earlier ingest that did not commit is dropped; one that did is
	// finished first (it is the store being replaced).
	if err := finishIngest(fs, dir); err != nil {
		return wrap(err)
	}
	tmp := subdir(dir, ingestTmp)
	if err := fs.RemoveAll(tmp); err != nil {
		return wrap(err)
	}
	if err := fs.MkdirAll(tmp, 0o755); err != nil {
		return wrap(err)
	}
	for _, part := range []string{"index", "segments"} {
		if err := fs.Rename(subdir(snapDir, part), subdir(tmp, part)); err != nil {
			return wrap(fmt.Errorf("move the snapshot's %s: %w", part, err))
		}
	}
	if err := ingestIndex(subdir(tmp, "index"), opts, &st); err != nil {
		return wrap(err)
	}
	if err := syncFiles(fs, subdir(tmp, "segments")); err != nil {
		return wrap(err)
	}
	if err := ingestWAL(subdir(tmp, "wal"), opts, &st); err != nil {
		return wrap(err)
	}
	if err := fsutil.SyncDir(fs, tmp); err != nil {
		return wrap(err)
	}
	// The commit point.
	if err := fs.Rename(tmp, subdir(dir, ingestDone)); err != nil {
		return wrap(err)
	}
	if err := fsutil.SyncDir(fs, dir); err != nil {
		return wrap(err)
	}
	if err := finishIngest(fs, dir); err != nil {
		return wrap(err)
	}
	return nil
}

// ingestIndex sets the snapshot's index up as the new store's: its
// checkpoint covers no WAL record (the new WAL starts afresh; the position
// is kept), and its group's log is compacted to the entry before st.Log's
// first (to the applied one if none).
func ingestIndex(dir string, opts Options, st *IngestState) error {
	db, err := index.Open(dir, opts.FS, 0)
	if err != nil {
		return err
	}
	err = func() error {
		var ss index.StoreState
		raw, closer, err := db.Get(index.StateKey())
		if err != nil {
			return fmt.Errorf("the snapshot's store state: %w", err)
		}
		err = index.DecodeStoreState(slices.Clone(raw), &ss)
		closer.Close()
		if err != nil {
			return fmt.Errorf("the snapshot's store state: %w", err)
		}
		if ss.Position == 0 {
			return errors.New("the snapshot is not a replicated store's")
		}
		var gs index.GroupState
		raw, closer, err = db.Get(index.GroupStateKey(nil, opts.Replication.Group))
		if err != nil {
			return fmt.Errorf("the snapshot's group %d state: %w", opts.Replication.Group, err)
		}
		err = index.DecodeGroupState(slices.Clone(raw), &gs)
		closer.Close()
		if err != nil {
			return fmt.Errorf("the snapshot's group state: %w", err)
		}
		gs.Compacted, gs.CompactedTerm = gs.Applied, gs.AppliedTerm
		if n := len(st.Log); n > 0 {
			if last := st.Log[n-1]; last.Index != gs.Applied || last.Term != gs.AppliedTerm {
				return fmt.Errorf("the log given ends at entry %d of term %d, the snapshot applied %d of term %d", last.Index, last.Term, gs.Applied, gs.AppliedTerm)
			}
			gs.Compacted, gs.CompactedTerm = st.Log[0].Index-1, st.PrevTerm
		}
		if st.HardState.Commit != gs.Applied {
			return fmt.Errorf("a hard state committing %d, the snapshot applied %d", st.HardState.Commit, gs.Applied)
		}
		ss.CheckpointLSN = 0
		b := db.NewBatch()
		defer b.Close()
		if err := b.Set(index.StateKey(), index.AppendStoreState(nil, &ss), nil); err != nil {
			return err
		}
		if err := b.Set(index.GroupStateKey(nil, opts.Replication.Group), index.AppendGroupState(nil, &gs), nil); err != nil {
			return err
		}
		return b.Commit(pebble.Sync)
	}()
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close the snapshot's index: %w", cerr)
	}
	return err
}

// ingestWAL writes the new store's WAL: st's entries, then its hard state.
func ingestWAL(dir string, opts Options, st *IngestState) error {
	w, err := wal.Open(dir, wal.Options{FS: opts.FS, SegmentSize: opts.WALSegmentSize, Logger: opts.Logger})
	if err != nil {
		return fmt.Errorf("open the new wal: %w", err)
	}
	var buf []byte
	for i := range st.Log {
		buf = encodeEntry(buf[:0], &st.Log[i])
		w.Append(buf, wal.Durable, nil)
	}
	buf = encodeHardState(buf[:0], &st.HardState)
	w.Append(buf, wal.Durable, nil)
	err = w.Sync()
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write the new wal: %w", err)
	}
	return nil
}

// syncFiles fsyncs every file in dir, and dir.
func syncFiles(fs vfs.FS, dir string) error {
	names, err := fs.List(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		f, err := fs.OpenReadWrite(filepath.Join(dir, name), vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("sync %s: %w", name, err)
		}
	}
	return fsutil.SyncDir(fs, dir)
}

// finishIngest completes or drops an ingest a crash interrupted: a
// complete one (dir/ingest) has its parts moved in place of the store's,
// one not complete (dir/ingest.tmp) is removed. It is idempotent: a crash
// in the middle of it leaves what it did for the next call.
func finishIngest(fs vfs.FS, dir string) error {
	done := subdir(dir, ingestDone)
	if _, err := fs.Stat(done); err == nil {
		for _, part := range ingestParts {
			from := subdir(done, part)
			if _, err := fs.Stat(from); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue // moved already
				}
				return err
			}
			if err := fs.RemoveAll(subdir(dir, part)); err != nil {
				return fmt.Errorf("remove the replaced %s: %w", part, err)
			}
			if err := fs.Rename(from, subdir(dir, part)); err != nil {
				return fmt.Errorf("move the snapshot's %s in: %w", part, err)
			}
		}
		// The moves are durable before their source goes.
		if err := fsutil.SyncDir(fs, dir); err != nil {
			return err
		}
		if err := fsutil.SyncDir(fs, done); err != nil {
			return err
		}
		if err := fs.RemoveAll(done); err != nil {
			return fmt.Errorf("remove %s: %w", done, err)
		}
		if err := fsutil.SyncDir(fs, dir); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := fs.RemoveAll(subdir(dir, ingestTmp)); err != nil {
		return fmt.Errorf("remove an unfinished ingest: %w", err)
	}
	return nil
}
