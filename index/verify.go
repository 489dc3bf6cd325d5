package index

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// CorruptionError reports damage in a file of the index: an sstable block
// that fails its checksum (found by Verify, or by a read or compaction
// while the index is open), or an sstable that cannot be read at all.
type CorruptionError struct {
	File string // path of the damaged file
	// Level and Bounds say what the file holds: its LSM level (-1 when
	// not known) and its smallest and largest keys, as DescribeKey puts
	// them ("" when not known).
	Level  int
	Bounds string
	Err    error // what Pebble found
}

func (e *CorruptionError) Error() string {
	msg := fmt.Sprintf("index: %s is damaged", e.File)
	switch {
	case e.Bounds != "" && e.Level >= 0:
		msg += fmt.Sprintf(" (level %d, holding %s)", e.Level, e.Bounds)
	case e.Bounds != "":
		msg += fmt.Sprintf(" (holding %s)", e.Bounds)
	}
	return msg + ": " + e.Err.Error()
}

func (e *CorruptionError) Unwrap() error { return e.Err }

// FromPebble returns err as a *CorruptionError when Pebble reports it as
// data corruption: naming the file it found it in, or else dir (damage in
// Pebble's own log or manifest, found when it opens); else err itself.
func FromPebble(dir string, err error) error {
	var ce *CorruptionError
	if err == nil || errors.As(err, &ce) {
		return err
	}
	if info := pebble.ExtractDataCorruptionInfo(err); info != nil {
		return &CorruptionError{File: info.Path, Level: -1, Bounds: describeBounds(info.Bounds.Start, info.Bounds.End.Key), Err: info.Details}
	}
	if pebble.IsCorruptionError(err) {
		return &CorruptionError{File: dir, Level: -1, Err: err}
	}
	return err
}

// TableReport is what Verify found in one sstable.
type TableReport struct {
	File   string
	Level  int
	Size   uint64
	Bounds string // its smallest and largest keys (DescribeKey)
	Err    error  // nil if every block checked out
}

// VerifyOptions are Options for opening dir to verify it (Verify).
func VerifyOptions(fs vfs.FS) *pebble.Options {
	o := Options(fs, 0)
	o.ReadOnly = true
	// Table statistics are loaded in the background after Open, reading
	// every table; one whose size does not match the MANIFEST makes Pebble
	// give up the process (Logger.Fatalf). Verify reads them itself.
	o.DisableTableStats = true
	return o
}

// Verify checks every block of every live sstable of the index in dir
// against its checksum, opening it read-only (VerifyOptions): nothing in
// dir is written. It returns what it found per table, in level order; a
// damaged Pebble WAL or MANIFEST makes the open itself fail. The caller
// keeps writers away (brokerd holds its data directory's lock).
func Verify(fs vfs.FS, dir string) ([]TableReport, error) {
	opts := VerifyOptions(fs)
	db, err := pebble.Open(dir, opts)
	if errors.Is(err, pebble.ErrDBDoesNotExist) {
		return nil, nil // never opened for writing: nothing in it
	}
	if err != nil {
		return nil, fmt.Errorf("open index %s read-only: %w", dir, FromPebble(dir, err))
	}
	defer db.Close()
	levels, err := db.SSTables()
	if err != nil {
		return nil, fmt.Errorf("list index tables: %w", err)
	}
	var ros []sstable.ReaderOptions // each table's, naming it in errors
	opts.EnsureDefaults()
	var out []TableReport
	for level, tables := range levels {
		for _, t := range tables {
			out = append(out, TableReport{
				File:   fs.PathJoin(dir, fmt.Sprintf("%s.sst", t.BackingSSTNum)),
				Level:  level,
				Size:   t.Size,
				Bounds: describeBounds(t.Smallest.UserKey, t.Largest.UserKey),
			})
			ro := opts.MakeReaderOptions()
			ro.CacheOpts.FileNum = t.BackingSSTNum
			ros = append(ros, ro)
		}
	}
	// The tables are checked on every core at once: a start waits for
	// them all (10M held messages make an index of 430 MB, 1 s read by
	// one goroutine).
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), len(out)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i].Err = verifyTable(fs, out[i].File, ros[i])
			}
		}()
	}
	for i := range out {
		next <- i
	}
	close(next)
	wg.Wait()
	return out, nil
}

// verifyTable reads every block of the sstable at path.
func verifyTable(fs vfs.FS, path string, ro sstable.ReaderOptions) error {
	f, err := fs.Open(path)
	if err != nil {
		return err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		f.Close()
		return err
	}
	r, err := sstable.NewReader(context.Background(), readable, ro)
	if err != nil {
		readable.Close()
		return err
	}
	err = r.ValidateBlockChecksums()
	if cerr := r.Close(); err == nil {
		err = cerr
	}
	return err
}

// Damaged returns the tables of reports whose check failed, as
// *CorruptionErrors.
func Damaged(reports []TableReport) []*CorruptionError {
	var out []*CorruptionError
	for _, r := range reports {
		if r.Err != nil {
			out = append(out, &CorruptionError{File: r.File, Level: r.Level, Bounds: r.Bounds, Err: r.Err})
		}
	}
	return out
}

// describeBounds describes a key range as DescribeKey puts its ends.
func describeBounds(lo, hi []byte) string {
	if lo == nil && hi == nil {
		return ""
	}
	return DescribeKey(lo) + " … " + DescribeKey(hi)
}

// DescribeKey says, for an operator, what the index key k is: its kind and
// the numbers in it ("entry queue 5 level 0 seq 1200", "message 8812").
func DescribeKey(k []byte) string {
	if len(k) == 0 {
		return "(start)"
	}
	switch k[0] {
	case prefixState:
		return "store state"
	case prefixMeta:
		if d, err := DecodeMetaKey(k); err == nil {
			return fmt.Sprintf("definition %q", d)
		}
	case prefixQueueState:
		if q, err := DecodeQueueStateKey(k); err == nil {
			return fmt.Sprintf("queue %d state", q)
		}
	case prefixSegment:
		if s, err := DecodeSegmentKey(k); err == nil {
			return fmt.Sprintf("segment %d accounting", s)
		}
	case prefixGroupState:
		if g, err := DecodeGroupStateKey(k); err == nil {
			return fmt.Sprintf("group %d state", g)
		}
	case prefixMsg:
		if m, err := DecodeMsgKey(k); err == nil {
			return fmt.Sprintf("message %d", m)
		}
	case prefixEntry:
		if q, prio, seq, err := DecodeEntryKey(k); err == nil {
			return fmt.Sprintf("entry queue %d level %d seq %d", q, prio, seq)
		}
	case prefixExpiry:
		if d, q, prio, seq, err := DecodeExpiryKey(k); err == nil {
			return fmt.Sprintf("expiry %d queue %d level %d seq %d", d, q, prio, seq)
		}
	}
	return fmt.Sprintf("key %x", k[:min(len(k), 16)])
}
