package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// logScan is what reading every file of a log found: each file with where
// its intact records end, where appending resumes, and every damage,
// classified. Scanning writes nothing; Open and Check both start with it.
type logScan struct {
	files     []fileMeta
	next      LSN   // LSN of the next record to append
	tailOff   int64 // offset after the last file's last intact record
	tailStale bool  // an earlier life's bytes follow it (spare.go)
	// headerless is the last file when its header was never written: it
	// holds no record and is created again.
	headerless string
	create     bool // the last file must be (re)created: none, or headerless
	records    int  // intact records read, skip records not counted
	damage     []*CorruptError
}

// scanLog reads every file in dir. Damage does not stop it: it reports the
// damage (with the LSNs lost and the intact records found after it) and
// reads on from the first intact record after it, except where the
// damage ends what Open keeps (a torn write in the last file). covered is
// Options.Covered: damage whose records are all at or below it is marked
// Covered.
func scanLog(fs vfs.FS, dir string, covered LSN) (*logScan, error) {
	sc := &logScan{}
	firsts, err := listFiles(fs, dir)
	if err != nil {
		return nil, err
	}
	if len(firsts) == 0 {
		sc.next = 1
		sc.files = []fileMeta{{first: 1, path: fs.PathJoin(dir, fileName(1))}}
		sc.create = true
		return sc, nil
	}
	sc.next = firsts[0]
	for i, first := range firsts {
		if first != sc.next {
			prev := sc.files[i-1]
			d := &CorruptError{File: prev.path, Offset: prev.size, Reason: fmt.Sprintf(
				"records end at LSN %d but the next file, %s, starts at LSN %d", sc.next-1, fileName(first), first)}
			if first > sc.next {
				// A missing file (or the end of this one zeroed): the
				// records in between are gone.
				d.FirstLSN, d.LastLSN = sc.next, first-1
				d.Covered = d.LastLSN <= covered
			}
			sc.damage = append(sc.damage, d)
		}
		var nextFirst LSN // 0: this is the last file
		if i+1 < len(firsts) {
			nextFirst = firsts[i+1]
		}
		if err := sc.scanFile(fs, fs.PathJoin(dir, fileName(first)), first, nextFirst, covered); err != nil {
			return nil, err
		}
	}
	return sc, nil
}

// scanFile reads one file whose name says its first LSN is first; the next
// file starts at nextFirst (0 for the last file).
func (sc *logScan) scanFile(fs vfs.FS, path string, first, nextFirst LSN, covered LSN) error {
	last := nextFirst == 0
	fm := fileMeta{first: first, path: path}
	var hdr *CorruptError
	r, err := openSegment(fs, path, first)
	var ce *CorruptError
	switch {
	case err == nil:
	case errors.Is(err, errNoHeader) && last && !holdsRecords(fs, path, first):
		// Normally created, then a crash before its header was synced,
		// so it holds no records: Open creates it again. (A header is
		// synced before any record is written: records after a missing
		// header are damage, below.)
		sc.files = append(sc.files, fm)
		sc.next, sc.tailOff, sc.headerless, sc.create = first, 0, path, true
		return nil
	case errors.Is(err, errNoHeader) || errors.As(err, &ce):
		reason := "file header missing (zeros, or the file is shorter than a header)"
		if ce != nil {
			reason = ce.Reason
		}
		// The header is derived from the name: read the records as if
		// it were intact, so what they hold is known.
		hdr = &CorruptError{File: path, Offset: 0, Reason: reason, Header: true,
			FirstLSN: first, LastLSN: first - 1, End: fileHeaderSize, NextLSN: first}
		hdr.Covered = !last && nextFirst-1 <= covered
		sc.damage = append(sc.damage, hdr)
		fm.badHeader = true
		if r, err = openRecords(fs, path, first); err != nil {
			return err
		}
	default:
		return err
	}
	defer r.close()
	chain := hdr != nil // counting the records after a damaged header
	jumped := false     // the next record is the first after damage: it gets an index entry
	for {
		off := r.off
		h, _, err := r.next()
		if err == io.EOF {
			break
		}
		if !errors.As(err, &ce) {
			if err != nil {
				return err
			}
			fm.index = addIndex(fm.index, h.lsn, off, jumped)
			jumped = false
			if h.class != classSkip {
				sc.records++
				if chain {
					hdr.IntactAfter++
					hdr.IntactLast = h.lsn
				}
			}
			continue
		}
		chain = false
		d, stop, err := classify(r, ce, first, nextFirst, covered)
		if err != nil {
			return err
		}
		sc.damage = append(sc.damage, d)
		if stop {
			break
		}
		fm.holes = append(fm.holes, hole{off: d.Offset, end: d.End, next: d.NextLSN})
		r.jump(d.End, d.NextLSN)
		jumped = true
	}
	fm.size = r.off
	sc.files = append(sc.files, fm)
	sc.next, sc.tailOff, sc.tailStale = r.expect, r.off, r.stale
	if !last && len(sc.damage) > 0 && sc.damage[len(sc.damage)-1].File == path && sc.damage[len(sc.damage)-1].End == 0 {
		// The file's end is damaged: what it lost runs to the next
		// file's first record, which scanLog must not report again.
		sc.next = nextFirst
	}
	return nil
}

// holdsRecords reports whether the file at path, whose first LSN is first,
// holds an intact record of its life (an LSN from first on) anywhere.
func holdsRecords(fs vfs.FS, path string, first LSN) bool {
	f, err := fs.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := readFrom(f, path, 0)
	return err == nil && findIntactRecords(b, first).count > 0
}

// classify completes ce, the damage r stopped at, from the bytes after it:
// the records lost, the intact records after it, whether it looks like a
// torn write or is covered. stop says that reading ends there (nothing
// intact follows, or a torn write that Open drops); otherwise reading goes
// on at ce.End.
func classify(r *segmentReader, ce *CorruptError, first, nextFirst, covered LSN) (d *CorruptError, stop bool, err error) {
	last := nextFirst == 0
	d = ce
	d.FirstLSN = r.expect
	rest, err := readFrom(r.f, r.path, ce.Offset)
	if err != nil {
		return nil, false, err
	}
	ir := findIntactRecords(rest, r.expect)
	// Records at or below covered were fsync'd before the checkpoint that
	// covers them: damage there is never a torn write.
	beyond := d.FirstLSN > covered
	if ir.count == 0 {
		switch {
		case !last:
			d.LastLSN = nextFirst - 1
			d.Covered = d.LastLSN <= covered
		case beyond:
			d.Torn = true
		default:
			// Damage at the end of the last file, in records a
			// checkpoint holds: nothing lost that matters.
			d.Covered = true
		}
		return d, true, nil
	}
	d.End = ce.Offset + int64(ir.at)
	d.NextLSN, d.IntactLast, d.IntactAfter = ir.first, ir.last, ir.count
	d.LastLSN = ir.first - 1
	if last && beyond && looksUnwritten(rest[:ir.at], ce.Offset, first) {
		d.Torn = true
		return d, true, nil
	}
	d.Covered = d.LastLSN <= covered
	return d, false, nil
}

// sectorSize is the unit a disk writes atomically, at the least: a write
// that did not complete leaves whole sectors as they were.
const sectorSize = 512

// looksUnwritten reports whether span, the bytes of a file from offset off
// on whose first LSN is first, holds a sector that a write never reached:
// an aligned sector of zeros (a preallocated file) or a whole record of the
// file's earlier life (a reused one, spare.go). A group whose write was cut
// short by a crash leaves such sectors, possibly with later sectors of the
// group written (the kernel writes pages back in any order); a flipped bit
// does not. (Nor can zeros that were written be told from a sector never
// written: a body of zeros whose record is damaged looks torn.)
func looksUnwritten(span []byte, off int64, first LSN) bool {
	for s := (off + sectorSize - 1) / sectorSize * sectorSize; s+sectorSize <= off+int64(len(span)); s += sectorSize {
		if allZero(span[s-off : s-off+sectorSize]) {
			return true
		}
	}
	for i := 0; i+recordHeaderSize <= len(span); i++ {
		if !Class(span[i+8]).onDisk() {
			continue
		}
		lsn := LSN(binary.LittleEndian.Uint64(span[i+9:]))
		if lsn == 0 || lsn >= first || int(binary.LittleEndian.Uint32(span[i+4:])) > len(span)-i-recordHeaderSize {
			continue
		}
		if _, _, _, err := decodeRecord(span[i:]); err == nil {
			return true
		}
	}
	return false
}

// maxLSNAhead bounds how far beyond the expected LSN a record found after
// damage may be: a cheap test that random bytes fail before their CRC is
// computed. Skip records make the gap exceed the bytes (one stands for
// many records), so it is generous.
const maxLSNAhead = 1 << 32

// intactRun is a chain of intact records findIntactRecords found.
type intactRun struct {
	at          int // offset of its first record in the bytes searched
	count       int
	first, last LSN
}

// findIntactRecords looks for a well-formed record anywhere after the first
// byte of b with an LSN of at least min, and follows the chain of records
// with consecutive LSNs that starts there (count 0: none found).
func findIntactRecords(b []byte, min LSN) intactRun {
	for i := 1; i+recordHeaderSize <= len(b); i++ {
		// Cheap rejections first: most offsets fail one of these.
		if !Class(b[i+8]).onDisk() {
			continue
		}
		lsn := LSN(binary.LittleEndian.Uint64(b[i+9:]))
		if lsn < min || lsn-min > maxLSNAhead {
			continue
		}
		if int(binary.LittleEndian.Uint32(b[i+4:])) > len(b)-i-recordHeaderSize {
			continue
		}
		h, payload, n, err := decodeRecord(b[i:])
		if err != nil {
			continue
		}
		next, err := recordNext(h, payload)
		if err != nil {
			continue
		}
		run := intactRun{at: i, count: 1, first: h.lsn, last: h.lsn}
		for j := i + n; j < len(b); j += n {
			h, payload, n, err = decodeRecord(b[j:])
			if err != nil || h.lsn != next {
				break
			}
			if next, err = recordNext(h, payload); err != nil {
				break
			}
			run.count, run.last = run.count+1, h.lsn
		}
		return run
	}
	return intactRun{}
}
