package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// fileMeta is one log file.
type fileMeta struct {
	first LSN    // LSN of its first record (its name)
	path  string // full path
	size  int64  // header + records; for the file being written, see WAL.activeOff
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
// last one, and says where appending resumes. See the package doc.
func recoverFiles(fs vfs.FS, dir string, log *slog.Logger) (recovery, error) {
	var rec recovery
	firsts, err := listFiles(fs, dir)
	if err != nil {
		return rec, err
	}
	if len(firsts) == 0 {
		rec.next, rec.create = 1, true
		rec.files = []fileMeta{{first: 1, path: fs.PathJoin(dir, fileName(1))}}
		return rec, nil
	}
	rec.next = firsts[0]
	for i, first := range firsts {
		path := fs.PathJoin(dir, fileName(first))
		last := i == len(firsts)-1
		if first != rec.next {
			prev := rec.files[i-1]
			return rec, &CorruptError{File: prev.path, Offset: prev.size, Reason: fmt.Sprintf(
				"records end at LSN %d but the next file, %s, starts at LSN %d", rec.next-1, fileName(first), first)}
		}
		r, err := openSegment(fs, path, first)
		if errors.Is(err, errNoHeader) {
			if !last {
				return rec, &CorruptError{File: path, Offset: 0, Reason: "file header missing (zeros, or the file is shorter than a header)"}
			}
			// Normally created, then a crash before its header was synced,
			// so it holds no records. Whatever it does hold is dropped.
			if err := dropHeaderless(fs, path, first, log); err != nil {
				return rec, err
			}
			rec.files = append(rec.files, fileMeta{first: first, path: path})
			rec.create = true
			return rec, nil
		}
		if err != nil {
			return rec, err
		}
		err = scanFile(r)
		r.close()
		var ce *CorruptError
		switch {
		case err == nil:
		case last && errors.As(err, &ce):
			if err := repairTail(fs, ce, r.expect, log); err != nil {
				return rec, err
			}
		default:
			return rec, err
		}
		rec.files = append(rec.files, fileMeta{first: first, path: path, size: r.off})
		rec.next = r.expect
		rec.tailOff = r.off
		rec.tailStale = r.stale
	}
	return rec, nil
}

// scanFile reads r to its clean end or its first damage.
func scanFile(r *segmentReader) error {
	for {
		if _, _, err := r.next(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// repairTail zeroes the last file from the damage ce reports to its end and
// fsyncs it, after logging what is dropped. expect is the LSN the damaged
// record should have carried.
func repairTail(fs vfs.FS, ce *CorruptError, expect LSN, log *slog.Logger) error {
	f, err := fs.OpenReadWrite(ce.File, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("open %s: %w", ce.File, err)
	}
	defer f.Close()
	tail, err := readFrom(f, ce.File, ce.Offset)
	if err != nil {
		return err
	}
	dirty := logDropped(log, ce.File, ce.Offset, ce.Reason, tail, expect)
	zeros := make([]byte, min(dirty, readChunk))
	for done := 0; done < dirty; {
		n := min(len(zeros), dirty-done)
		if _, err := f.WriteAt(zeros[:n], ce.Offset+int64(done)); err != nil {
			return fmt.Errorf("write %s: %w", ce.File, err)
		}
		done += n
	}
	if err := f.SyncData(); err != nil {
		return fmt.Errorf("sync %s: %w", ce.File, err)
	}
	return nil
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
	logDropped(log, path, 0, "file header missing", data, first)
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

// logDropped logs the data from off on that a repair drops (tail) and
// returns how many bytes of it are not trailing zeros.
func logDropped(log *slog.Logger, path string, off int64, reason string, tail []byte, expect LSN) int {
	dirty := len(tail)
	for dirty > 0 && tail[dirty-1] == 0 {
		dirty--
	}
	count, lo, hi := findIntactRecords(tail, expect)
	level, msg := slog.LevelWarn, "wal: dropping the torn tail of the last log file"
	if count > 0 {
		// Intact records after the damage: not a torn write, and records
		// that may have been confirmed are lost.
		level, msg = slog.LevelError, "wal: dropping damaged data in the last log file and the intact records after it"
	}
	log.Log(context.Background(), level, msg, "file", path, "offset", off, "reason", reason,
		"dropped_bytes", dirty, "intact_records_after", count, "first_lsn_after", uint64(lo), "last_lsn_after", uint64(hi))
	return dirty
}

// findIntactRecords looks for a well-formed record anywhere after the first
// byte of b with an LSN of at least min, and counts the chain of records
// with consecutive LSNs that starts there. It only informs the repair log.
func findIntactRecords(b []byte, min LSN) (count int, first, last LSN) {
	for i := 1; i+recordHeaderSize <= len(b); i++ {
		// Cheap rejections first: most offsets fail one of these.
		if !Class(b[i+8]).valid() {
			continue
		}
		lsn := LSN(binary.LittleEndian.Uint64(b[i+9:]))
		if lsn < min || lsn-min > LSN(len(b)) {
			continue
		}
		if int(binary.LittleEndian.Uint32(b[i+4:])) > len(b)-i-recordHeaderSize {
			continue
		}
		h, _, n, err := decodeRecord(b[i:])
		if err != nil {
			continue
		}
		count, first, last = 1, h.lsn, h.lsn
		for j := i + n; j < len(b); j += n {
			h, _, n, err = decodeRecord(b[j:])
			if err != nil || h.lsn != last+1 {
				break
			}
			count, last = count+1, h.lsn
		}
		return count, first, last
	}
	return 0, 0, 0
}
