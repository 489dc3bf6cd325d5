package wal

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// fileMeta is one log file.
type fileMeta struct {
	first LSN    // LSN of its first record (its name)
	path  string // full path
	// size is its header and records: for the file being written, those
	// whose write returned (noteWritten; Stats reads WAL.activeOff).
	size int64
	// holes is damage in it Open stepped over (every record lost in it
	// is covered, Options.Covered); badHeader, a damaged header Open
	// let be for the same reason. Replay reads past both.
	holes     []hole
	badHeader bool
	// index is where some of its records start, for ReadAt (index.go).
	index []indexEntry
}

// recovery is what Open found on disk.
type recovery struct {
	files   []fileMeta // gapless; the last is the one to append to
	next    LSN        // LSN of the next record
	tailOff int64      // offset after the last file's last record
	// tailStale: an earlier life's bytes follow the last file's records
	// (spare.go), so appends to it must keep marking their end.
	tailStale bool
	create    bool // the last file must be (re)created: none, or its header was incomplete
}

// recoverFiles validates every file in dir, repairs a torn tail of the
// last one, and says where appending resumes. Damage that loses records
// the caller needs (above covered) and is not a torn write is returned as
// a *CorruptError before anything is written. See the package doc.
func recoverFiles(fs vfs.FS, dir string, covered LSN, log *slog.Logger) (recovery, error) {
	var rec recovery
	sc, err := scanLog(fs, dir, covered)
	if err != nil {
		return rec, err
	}
	var torn, coveredTail *CorruptError
	for _, d := range sc.damage {
		switch {
		case d.Torn:
			torn = d
		case d.Covered && d.LastLSN == 0:
			coveredTail = d // the end of the last file, in covered records
		case d.Covered:
		default:
			return rec, d
		}
	}
	for _, d := range sc.damage {
		if d.Covered {
			log.Warn("wal: damaged records the checkpoint already holds; nothing is lost", "file", d.File, "offset", d.Offset,
				"reason", d.Reason, "first_lsn", uint64(d.FirstLSN), "last_lsn", uint64(d.LastLSN), "covered", uint64(covered))
		}
	}
	rec = recovery{files: sc.files, next: sc.next, tailOff: sc.tailOff, tailStale: sc.tailStale, create: sc.create}
	last := &rec.files[len(rec.files)-1]
	switch {
	case sc.headerless != "":
		if err := dropHeaderless(fs, sc.headerless, last.first, log); err != nil {
			return rec, err
		}
	case torn != nil:
		if err := repairTail(fs, torn, log); err != nil {
			return rec, err
		}
	case coveredTail != nil:
		// Zero the damage and write a skip record in its place that
		// takes the log on to the record after the checkpoint: new
		// records must not reuse LSNs the checkpoint counts as done.
		next := covered + 1
		if err := repairTail(fs, coveredTail, log); err != nil {
			return rec, err
		}
		end, err := writeSkip(fs, coveredTail.File, coveredTail.Offset, coveredTail.FirstLSN, next)
		if err != nil {
			return rec, err
		}
		last.size, rec.tailOff, rec.next = end, end, next
	}
	return rec, nil
}

// repairTail zeroes the last file from the damage ce reports to its end and
// fsyncs it, after logging what is dropped: a torn write, which no one was
// told was durable.
func repairTail(fs vfs.FS, ce *CorruptError, log *slog.Logger) error {
	f, err := fs.OpenReadWrite(ce.File, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("open %s: %w", ce.File, err)
	}
	defer f.Close()
	tail, err := readFrom(f, ce.File, ce.Offset)
	if err != nil {
		return err
	}
	dirty := logDropped(log, ce, tail)
	if err := zeroAt(f, ce.File, ce.Offset, dirty); err != nil {
		return err
	}
	if err := f.SyncData(); err != nil {
		return fmt.Errorf("sync %s: %w", ce.File, err)
	}
	return nil
}

// zeroAt writes n zeros at off of f.
func zeroAt(f vfs.File, path string, off int64, n int) error {
	zeros := make([]byte, min(n, readChunk))
	for done := 0; done < n; {
		k := min(len(zeros), n-done)
		if _, err := f.WriteAt(zeros[:k], off+int64(done)); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		done += k
	}
	return nil
}

// writeSkip writes a skip record with LSN lsn at off of the file at path,
// followed by the record with LSN next, and fsyncs the file. It returns the
// offset after it.
func writeSkip(fs vfs.FS, path string, off int64, lsn, next LSN) (int64, error) {
	rec, _ := appendSkipRecord(nil, lsn, next, recordHeaderSize+skipNextSize)
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(rec, off); err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.SyncData(); err != nil {
		return 0, fmt.Errorf("sync %s: %w", path, err)
	}
	return off + int64(len(rec)), nil
}

// dropHeaderless reports what a last file without a header holds; Open
// then creates it again.
func dropHeaderless(fs vfs.FS, path string, first LSN, log *slog.Logger) error {
	f, err := fs.Open(path)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	data, err := readFrom(f, path, 0)
	if err != nil {
		return err
	}
	if allZero(data) {
		log.Warn("wal: recreating a log file whose header was never written", "file", path)
		return nil
	}
	logDropped(log, &CorruptError{File: path, Reason: "file header missing", FirstLSN: first}, data)
	return nil
}

// readFrom reads f from off to its end.
func readFrom(f vfs.File, path string, off int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	b := make([]byte, max(st.Size()-off, 0))
	if n, err := f.ReadAt(b, off); n < len(b) {
		return nil, fmt.Errorf("read %s at offset %d: %w", path, off, err)
	}
	return b, nil
}

// logDropped logs the data from ce.Offset on that a repair of a torn tail
// drops (tail) and returns how many bytes of it are not trailing zeros.
func logDropped(log *slog.Logger, ce *CorruptError, tail []byte) int {
	dirty := len(tail)
	for dirty > 0 && tail[dirty-1] == 0 {
		dirty--
	}
	level, msg := slog.LevelWarn, "wal: dropping the torn tail of the last log file"
	if ce.IntactAfter > 0 {
		// Sectors a crash left unwritten, with later ones of the same
		// writes on disk: none of it was ever synced, unless the zeros
		// are damage (a lost write) — then records were lost.
		level, msg = slog.LevelError, "wal: dropping a torn write in the last log file and the intact records after it"
	}
	log.Log(context.Background(), level, msg, "file", ce.File, "offset", ce.Offset, "reason", ce.Reason,
		"dropped_bytes", dirty, "first_lsn", uint64(ce.FirstLSN), "intact_records_after", ce.IntactAfter,
		"first_lsn_after", uint64(ce.NextLSN), "last_lsn_after", uint64(ce.IntactLast))
	return dirty
}
