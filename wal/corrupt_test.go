package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A corruption case damages the bytes of one file and says where valid
// data must end: the offset of the first record (or 0: the header) that
// can no longer be trusted.
type corruptCase struct {
	name   string
	damage func(b []byte, recs []recLoc) (damaged []byte, cut int64)
	// fatal: damage Open must refuse even in the last file.
	fatal bool
}

const (
	goldenRecords = 60
	goldenSegment = 4096
)

// golden is a closed log of goldenRecords records in several files, built
// once and cloned for each case.
func golden(t *testing.T) *vfs.MemFS {
	t.Helper()
	fs := vfs.NewMem()
	w := mustOpen(t, fs, Options{SegmentSize: goldenSegment})
	appendSeq(t, w, 1, goldenRecords)
	mustClose(t, w)
	files := walFiles(t, fs)
	if len(files) < 3 || len(layout(t, fs, files[len(files)-1])) < 4 {
		t.Fatalf("golden log has %d files and %d records in the last; the cases need more",
			len(files), len(layout(t, fs, files[len(files)-1])))
	}
	return fs
}

func corruptCases(t *testing.T, fs vfs.FS) []corruptCase {
	last := func(recs []recLoc) recLoc { return recs[len(recs)-1] }
	mid := func(recs []recLoc) recLoc { return recs[len(recs)/2] }
	// modify rewrites bytes of record r in place.
	modify := func(pick func([]recLoc) recLoc, fn func(rec []byte)) func([]byte, []recLoc) ([]byte, int64) {
		return func(b []byte, recs []recLoc) ([]byte, int64) {
			r := pick(recs)
			fn(b[r.off : r.off+r.size])
			return b, r.off
		}
	}
	// containing returns the offset of the record holding byte off (0 for
	// the header).
	containing := func(recs []recLoc, off int64) int64 {
		if off < fileHeaderSize {
			return 0
		}
		for _, r := range recs {
			if off < r.off+r.size {
				return r.off
			}
		}
		return recs[len(recs)-1].off + recs[len(recs)-1].size
	}
	zeroSector := func(sector func([]recLoc) int64) func([]byte, []recLoc) ([]byte, int64) {
		return func(b []byte, recs []recLoc) ([]byte, int64) {
			s := sector(recs) / 512 * 512
			clear(b[s:min(s+512, int64(len(b)))])
			return b, containing(recs, s)
		}
	}

	cases := []corruptCase{
		{name: "flipped CRC bit", damage: modify(mid, func(r []byte) { r[2] ^= 0x10 })},
		{name: "flipped payload bit", damage: modify(mid, func(r []byte) { r[len(r)-1] ^= 1 })},
		{name: "flipped class", damage: modify(mid, func(r []byte) { r[8] = 3 })},
		{name: "length beyond the file", damage: modify(mid, func(r []byte) { binary.LittleEndian.PutUint32(r[4:], 1<<20) })},
		{name: "length above MaxRecordSize", damage: modify(mid, func(r []byte) { binary.LittleEndian.PutUint32(r[4:], MaxRecordSize+1) })},
		{name: "length one short", damage: modify(mid, func(r []byte) {
			binary.LittleEndian.PutUint32(r[4:], binary.LittleEndian.Uint32(r[4:])-1)
		})},
		{name: "stale LSN with a valid CRC", damage: modify(mid, func(r []byte) {
			binary.LittleEndian.PutUint64(r[9:], binary.LittleEndian.Uint64(r[9:])+1000)
			binary.LittleEndian.PutUint32(r[0:], crc32.Checksum(r[4:], crcTable))
		})},
		{name: "zeroed header before live records", damage: modify(mid, func(r []byte) { clear(r[:recordHeaderSize]) })},
		{name: "zeroed sector inside a record", damage: zeroSector(func(recs []recLoc) int64 { return mid(recs).off + 5 })},
		{name: "zeroed sector at the header", damage: zeroSector(func([]recLoc) int64 { return 0 })},
		{name: "garbage after the last record", damage: func(b []byte, recs []recLoc) ([]byte, int64) {
			return append(b, "stale bytes"...), int64(len(b))
		}},
		{name: "bad magic", fatal: true, damage: func(b []byte, _ []recLoc) ([]byte, int64) {
			b[0] ^= 0xff
			return b, 0
		}},
		{name: "bad format version", fatal: true, damage: func(b []byte, _ []recLoc) ([]byte, int64) {
			binary.LittleEndian.PutUint32(b[4:], formatVersion+1)
			return b, 0
		}},
	}
	// A torn write of the last record at every byte: the file cut there, or
	// zeros from there on (a preallocated file).
	fsFiles := walFiles(t, fs)
	lastRec := last(layout(t, fs, fsFiles[len(fsFiles)-1]))
	for k := range lastRec.size {
		cases = append(cases,
			corruptCase{name: fmt.Sprintf("torn last record cut at +%d", k), damage: func(b []byte, recs []recLoc) ([]byte, int64) {
				r := last(recs)
				return b[:r.off+min(k, r.size-1)], r.off
			}},
			corruptCase{name: fmt.Sprintf("torn last record zeroed from +%d", k), damage: func(b []byte, recs []recLoc) ([]byte, int64) {
				r := last(recs)
				clear(b[r.off+min(k, r.size-1):])
				return b, r.off
			}},
		)
	}
	return cases
}

// TestCorruption applies every case to the last file (Open repairs: every
// record before the damage is kept and the log appends after it) and to an
// earlier file (Open refuses with a *CorruptError at the damage).
func TestCorruption(t *testing.T) {
	gold := golden(t)
	for _, c := range corruptCases(t, gold) {
		for _, target := range []string{"last", "earlier"} {
			t.Run(target+"/"+c.name, func(t *testing.T) {
				fs := vfs.NewMem()
				if _, err := vfs.Clone(gold, fs, testDir, testDir); err != nil {
					t.Fatal(err)
				}
				files := walFiles(t, fs)
				idx := len(files) - 1
				if target == "earlier" {
					idx = len(files) - 2
				}
				path := files[idx]
				recs := layout(t, fs, path)
				damaged, cut := c.damage(readFile(t, fs, path), recs)
				writeFile(t, fs, path, damaged)

				var logs logBuf
				w, err := Open(testDir, Options{FS: fs, SegmentSize: goldenSegment, Logger: logs.logger()})
				if target == "earlier" || c.fatal {
					var ce *CorruptError
					if !errors.As(err, &ce) {
						if err == nil {
							w.Close()
						}
						t.Fatalf("Open = %v, want a *CorruptError", err)
					}
					if ce.File != path || ce.Offset != cut {
						t.Fatalf("CorruptError at %s offset %d (%s), want %s offset %d", ce.File, ce.Offset, ce.Reason, path, cut)
					}
					return
				}
				if err != nil {
					t.Fatalf("Open of a torn last file: %v", err)
				}
				checkRepaired(t, fs, w, &logs, recs, cut, damaged)
			})
		}
	}
}

// checkRepaired checks a log whose last file was damaged at cut: every
// record before cut is there, nothing after, the repair said what it
// dropped, and the log takes and keeps new records.
func checkRepaired(t *testing.T, fs vfs.FS, w *WAL, logs *logBuf, recs []recLoc, cut int64, damaged []byte) {
	t.Helper()
	keep := int(recs[0].lsn) - 1 // last LSN before the damage
	for _, r := range recs {
		if r.off+r.size <= cut {
			keep = int(r.lsn)
		}
	}
	if got := w.LastLSN(); got != LSN(keep) {
		w.Close()
		t.Fatalf("LastLSN after repair = %d, want %d", got, keep)
	}
	checkSeq(t, replayAll(t, w, 1), 1, keep)
	if cut < int64(len(damaged)) && !allZero(damaged[cut:]) {
		if want := fmt.Sprintf("offset=%d", cut); !strings.Contains(logs.String(), want) {
			t.Errorf("repair log does not report %s:\n%s", want, logs.String())
		}
	}
	if lsn := appendWait(t, w, Durable, payload(keep+1))[0]; lsn != LSN(keep+1) {
		t.Fatalf("Append after repair got LSN %d, want %d", lsn, keep+1)
	}
	mustClose(t, w)
	w = mustOpen(t, fs, Options{SegmentSize: goldenSegment})
	defer mustClose(t, w)
	checkSeq(t, replayAll(t, w, 1), 1, keep+1)
}

// TestCorruptionReportsIntactRecordsLost checks that damage in the middle of
// the last file, which drops intact records, is logged as an error naming
// them, not as an ordinary torn tail.
func TestCorruptionReportsIntactRecordsLost(t *testing.T) {
	fs := golden(t)
	files := walFiles(t, fs)
	path := files[len(files)-1]
	recs := layout(t, fs, path)
	b := readFile(t, fs, path)
	b[recs[0].off+3] ^= 1 // first record's CRC
	writeFile(t, fs, path, b)

	var logs logBuf
	w := mustOpen(t, fs, Options{SegmentSize: goldenSegment, Logger: logs.logger()})
	defer mustClose(t, w)
	want := fmt.Sprintf("intact_records_after=%d first_lsn_after=%d last_lsn_after=%d",
		len(recs)-1, recs[1].lsn, recs[len(recs)-1].lsn)
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, want) {
		t.Fatalf("repair log lacks an error with %q:\n%s", want, out)
	}
}

// TestMissingMiddleFile checks that a gap between files is corruption.
func TestMissingMiddleFile(t *testing.T) {
	fs := golden(t)
	files := walFiles(t, fs)
	if err := fs.Remove(files[1]); err != nil {
		t.Fatal(err)
	}
	_, err := Open(testDir, Options{FS: fs, Logger: discardLogger()})
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != files[0] || !strings.Contains(ce.Reason, fileName(mustParse(t, fs, files[2]))) {
		t.Fatalf("Open with a missing middle file = %v, want a *CorruptError at the end of %s", err, files[0])
	}
	recs := layout(t, fs, files[0])
	if end := recs[len(recs)-1].off + recs[len(recs)-1].size; ce.Offset != end {
		t.Fatalf("CorruptError offset %d, want the end of the records, %d", ce.Offset, end)
	}
}

// TestLastFileWithoutHeader is a crash between creating a file and syncing
// its header: the file holds nothing and is created again.
func TestLastFileWithoutHeader(t *testing.T) {
	for _, size := range []int{0, 7, fileHeaderSize} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			fs := golden(t)
			next := fs.PathJoin(testDir, fileName(goldenRecords+1))
			writeFile(t, fs, next, make([]byte, size))
			w := mustOpen(t, fs, Options{SegmentSize: goldenSegment})
			checkSeq(t, replayAll(t, w, 1), 1, goldenRecords)
			appendSeq(t, w, goldenRecords+1, goldenRecords+1)
			mustClose(t, w)
			if b := readFile(t, fs, next); len(b) < fileHeaderSize || !bytes.Equal(b[:fileHeaderSize], appendFileHeader(nil, goldenRecords+1)) {
				t.Fatalf("%s was not created again with a header", next)
			}
			w = mustOpen(t, fs, Options{SegmentSize: goldenSegment})
			defer mustClose(t, w)
			checkSeq(t, replayAll(t, w, 1), 1, goldenRecords+1)
		})
	}
}

func mustParse(t *testing.T, fs vfs.FS, path string) LSN {
	lsn, ok := parseFileName(fs.PathBase(path))
	if !ok {
		t.Fatalf("bad name %s", path)
	}
	return lsn
}
