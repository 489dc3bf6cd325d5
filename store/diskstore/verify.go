package diskstore

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/segment"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/wal"
)

// VerifyReport is what Verify found in a data directory.
type VerifyReport struct {
	// CheckpointLSN is the WAL position the index reflects: WAL damage
	// at or below it costs nothing. CheckpointKnown is false when the
	// index could not be read (then no WAL damage counts as covered).
	CheckpointLSN   uint64
	CheckpointKnown bool
	// Index is each live sstable of the index and whether every block of
	// it checked out. IndexErr is why the index could not be read at all
	// (damage in Pebble's own log or manifest), or, after Index, why the
	// records Verify reads through it could not all be read; nil if none.
	Index    []index.TableReport
	IndexErr error
	// WAL is what wal.Check found (nil if the WAL could not be listed:
	// WALErr says why).
	WAL    *wal.Report
	WALErr error
	// Segments is each segment file with its damage; SegmentDamage adds
	// what each damaged span held.
	Segments      []segment.FileReport
	SegmentDamage []SegmentDamage
	SegmentsErr   error
	// Definitions are the definition records as of the checkpoint (those
	// changed since are in the WAL), for naming queues: ScanMeta's keys and
	// values.
	Definitions map[string][]byte
}

// SegmentDamage is a damaged span of a segment file and what it held, as
// the index says.
type SegmentDamage struct {
	File string
	segment.BlockDamage
	// Live says whether the index refers to the segment at all (a file
	// it does not know is left by an unfinished checkpoint: its damage
	// costs nothing, and the next start removes it).
	Live bool
	// Msgs counts the stored messages whose body lies in the span: lost.
	// Queues counts, per queue, the entries that refer to them (as of the
	// checkpoint).
	Msgs   int
	Queues map[store.QueueID]int
}

// Damaged reports whether r holds any damage. Not damage: a torn end of
// the last WAL file with no intact record after it (what every crash
// leaves, of records never synced), and damage in a segment file the index
// does not refer to (an unfinished checkpoint's output, which the next
// start removes).
func (r *VerifyReport) Damaged() bool {
	if r.IndexErr != nil || r.WALErr != nil || r.SegmentsErr != nil || len(index.Damaged(r.Index)) > 0 {
		return true
	}
	for _, d := range r.SegmentDamage {
		if d.Live {
			return true
		}
	}
	if r.WAL != nil {
		for _, d := range r.WAL.Damage {
			if !d.Torn || d.IntactAfter > 0 {
				return true
			}
		}
	}
	return false
}

// Verify reads every WAL record, segment block and index block of the data
// directory dir and reports what is damaged and what it held, without
// changing anything: the index is opened read-only, WAL and segment files
// are only read. The caller keeps brokerd away from dir (its lock).
// Errors other than damage (dir is not a data directory, I/O) are
// returned.
func Verify(fs vfs.FS, dir string) (*VerifyReport, error) {
	if fs == nil {
		fs = vfs.Default
	}
	for _, sub := range []string{"wal", "segments", "index"} {
		if _, err := fs.Stat(subdir(dir, sub)); err != nil {
			return nil, fmt.Errorf("%s is not a brokerd data directory: %w", dir, err)
		}
	}
	r := &VerifyReport{Definitions: map[string][]byte{}}
	idx := subdir(dir, "index")
	r.Index, r.IndexErr = index.Verify(fs, idx)
	// What the index holds: the checkpoint, message locations, entries.
	var db *pebble.DB
	if r.IndexErr == nil && len(index.Damaged(r.Index)) == 0 {
		var err error
		if db, err = pebble.Open(subdir(dir, "index"), index.VerifyOptions(fs)); err != nil {
			r.IndexErr = index.FromPebble(idx, err)
		} else {
			defer db.Close()
			if err := r.readState(db, idx); err != nil {
				r.IndexErr = err
			} else {
				r.CheckpointKnown = true
			}
		}
	}
	r.WAL, r.WALErr = wal.Check(fs, subdir(dir, "wal"), wal.LSN(r.CheckpointLSN))
	r.Segments, r.SegmentsErr = segment.Verify(fs, subdir(dir, "segments"))
	for _, f := range r.Segments {
		for _, d := range f.Damage {
			r.SegmentDamage = append(r.SegmentDamage, SegmentDamage{File: f.File, BlockDamage: d, Live: true, Queues: map[store.QueueID]int{}})
		}
	}
	if db != nil {
		if err := r.attribute(db, idx); err != nil && r.IndexErr == nil {
			r.IndexErr = err
		}
	}
	return r, nil
}

// readState reads the checkpoint LSN and the definitions.
func (r *VerifyReport) readState(db *pebble.DB, idx string) error {
	raw, closer, err := db.Get(index.StateKey())
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return fmt.Errorf("read store state: %w", index.FromPebble(idx, err))
	default:
		var st index.StoreState
		derr := index.DecodeStoreState(slices.Clone(raw), &st)
		closer.Close()
		if derr != nil {
			return fmt.Errorf("read store state: %w", derr)
		}
		r.CheckpointLSN = st.CheckpointLSN
	}
	lo, hi := index.MetaPrefixBounds(nil)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		if k, err := index.DecodeMetaKey(it.Key()); err == nil {
			r.Definitions[string(k)] = bytes.Clone(it.Value())
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("read definitions: %w", index.FromPebble(idx, err))
	}
	return nil
}

// attribute finds, through the index, the messages whose body lies in a
// damaged segment span and the entries that refer to them.
func (r *VerifyReport) attribute(db *pebble.DB, idx string) error {
	segFile := map[segment.ID]string{}
	segSize := map[string]int64{}
	for _, f := range r.Segments {
		segFile[f.ID] = f.File
		segSize[f.File] = f.Size
	}
	lo, hi := index.SegmentBounds()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for it.First(); it.Valid(); it.Next() {
		if id, err := index.DecodeSegmentKey(it.Key()); err == nil {
			live[segFile[segment.ID(id)]] = true
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("read segment accounting: %w", index.FromPebble(idx, err))
	}
	for i := range r.SegmentDamage {
		r.SegmentDamage[i].Live = live[r.SegmentDamage[i].File]
	}
	// Message records whose location lies in a damaged span.
	lost := map[store.MsgID]int{} // → index into SegmentDamage
	it, err = db.NewIter(kindBounds(index.MsgKey(nil, 0)))
	if err != nil {
		return err
	}
	var mv index.MsgValue
	for it.First(); it.Valid(); it.Next() {
		id, err := index.DecodeMsgKey(it.Key())
		if err != nil || index.DecodeMsgValue(slices.Clone(it.Value()), &mv) != nil {
			continue
		}
		loc, err := segment.DecodeLoc(mv.Loc)
		if err != nil {
			continue
		}
		file := segFile[loc.Seg]
		at := -1
		for i, d := range r.SegmentDamage {
			if d.File == file && !d.Header && int64(loc.Block) >= d.Offset && int64(loc.Block) < d.End {
				at = i
				break
			}
		}
		if at < 0 && file != "" && int64(loc.Block) >= segSize[file] {
			// The file ends before a block the index refers to.
			at = slices.IndexFunc(r.SegmentDamage, func(d SegmentDamage) bool { return d.File == file && d.Offset == segSize[file] && !d.Header })
			if at < 0 {
				r.SegmentDamage = append(r.SegmentDamage, SegmentDamage{File: file, Live: true, Queues: map[store.QueueID]int{},
					BlockDamage: segment.BlockDamage{Offset: segSize[file], End: segSize[file], Reason: "the file ends before blocks the index refers to (cut short)"}})
				at = len(r.SegmentDamage) - 1
			}
		}
		if at >= 0 {
			lost[store.MsgID(id)] = at
			r.SegmentDamage[at].Msgs++
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("read message records: %w", index.FromPebble(idx, err))
	}
	if len(lost) == 0 {
		return nil
	}
	it, err = db.NewIter(kindBounds(index.EntryKey(nil, 0, 0, 0)))
	if err != nil {
		return err
	}
	var ev index.EntryValue
	for it.First(); it.Valid(); it.Next() {
		q, _, _, err := index.DecodeEntryKey(it.Key())
		if err != nil || index.DecodeEntryValue(slices.Clone(it.Value()), &ev) != nil {
			continue
		}
		if i, ok := lost[store.MsgID(ev.Msg)]; ok {
			r.SegmentDamage[i].Queues[store.QueueID(q)]++
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("read entries: %w", index.FromPebble(idx, err))
	}
	return nil
}

// kindBounds bounds every key of the kind whose first key is k.
func kindBounds(k []byte) *pebble.IterOptions {
	return &pebble.IterOptions{LowerBound: k[:1], UpperBound: []byte{k[0] + 1}}
}

// RepairWAL drops the damaged records of the data directory dir's WAL
// that rep (Verify's report of it, unchanged since) names, with
// wal.Repair and the checkpoint LSN rep read from the index, and returns
// what the WAL holds after. The caller holds the directory's lock.
func RepairWAL(fs vfs.FS, dir string, rep *VerifyReport) (*wal.Report, error) {
	if fs == nil {
		fs = vfs.Default
	}
	if !rep.CheckpointKnown || rep.WAL == nil {
		return nil, errors.New("diskstore: the WAL cannot be repaired without a readable index and WAL")
	}
	return wal.Repair(fs, subdir(dir, "wal"), wal.LSN(rep.CheckpointLSN), rep.WAL)
}
