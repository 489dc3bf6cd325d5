package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
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
	// torn: in the last file, what a write cut short by a crash leaves
	// (nothing intact after it, or an unwritten sector): Open keeps the
	// records before cut and drops the rest. Any other damage Open refuses
	// (unless Options.Covered covers it), writing nothing, and Repair
	// drops exactly the records it damaged.
	torn bool
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
		{name: "zeroed sector inside a record", torn: true, damage: zeroSector(func(recs []recLoc) int64 { return mid(recs).off + 5 })},
		{name: "zeroed sector at the header", damage: zeroSector(func([]recLoc) int64 { return 0 })},
		{name: "garbage after the last record", torn: true, damage: func(b []byte, recs []recLoc) ([]byte, int64) {
			return append(b, "stale bytes"...), int64(len(b))
		}},
		{name: "bad magic", damage: func(b []byte, _ []recLoc) ([]byte, int64) {
			b[0] ^= 0xff
			return b, 0
		}},
		{name: "bad format version", damage: func(b []byte, _ []recLoc) ([]byte, int64) {
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
			corruptCase{name: fmt.Sprintf("torn last record cut at +%d", k), torn: true, damage: func(b []byte, recs []recLoc) ([]byte, int64) {
				r := last(recs)
				return b[:r.off+min(k, r.size-1)], r.off
			}},
			corruptCase{name: fmt.Sprintf("torn last record zeroed from +%d", k), torn: true, damage: func(b []byte, recs []recLoc) ([]byte, int64) {
				r := last(recs)
				clear(b[r.off+min(k, r.size-1):])
				return b, r.off
			}},
		)
	}
	return cases
}

// TestCorruption applies every case to the last file and to an earlier
// one. A torn write in the last file is repaired by Open: every record
// before the damage is kept and the log appends after it. Any other damage
// makes Open refuse with a *CorruptError at the damage naming the records
// lost and the intact ones after it, and write nothing; with
// Options.Covered at or above the records lost (a checkpoint holds them)
// Open steps over it and replays the rest; Repair drops exactly the
// damaged records and keeps every intact one, after which Open accepts the
// log and appends continue.
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
				orig := readFile(t, fs, path)
				damaged, cut := c.damage(slices.Clone(orig), recs)
				writeFile(t, fs, path, damaged)

				var logs logBuf
				w, err := Open(testDir, Options{FS: fs, SegmentSize: goldenSegment, Logger: logs.logger()})
				if target == "last" && c.torn {
					if err != nil {
						t.Fatalf("Open of a torn last file: %v", err)
					}
					checkRepaired(t, fs, w, &logs, recs, cut, damaged)
					return
				}
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
				if got := readFile(t, fs, path); !bytes.Equal(got, damaged) {
					t.Fatalf("Open refused but changed %s", path)
				}
				lost := changedRecords(recs, orig, damaged)
				if len(lost) > 0 && !ce.Header && (ce.FirstLSN != lost[0] || ce.LastLSN != lost[len(lost)-1]) {
					t.Fatalf("CorruptError names records %d–%d as lost, want %d–%d: %v", ce.FirstLSN, ce.LastLSN, lost[0], lost[len(lost)-1], ce)
				}
				if !(ce.Header && target == "last") {
					// A checkpoint that holds the records lost: nothing
					// is lost, and Open steps over the damage.
					covered := recs[len(recs)-1].lsn // a damaged header: the whole file
					if len(lost) > 0 && !ce.Header {
						covered = lost[len(lost)-1]
					}
					w, err := Open(testDir, Options{FS: fs, SegmentSize: goldenSegment, Logger: discardLogger(), Covered: covered})
					if err != nil {
						t.Fatalf("Open with the damage covered (Covered %d): %v", covered, err)
					}
					checkLSNs(t, replayAll(t, w, 1), lost)
					mustClose(t, w)
					if got := readFile(t, fs, path); !bytes.Equal(got, damaged) {
						t.Fatalf("Open over covered damage changed %s", path)
					}
				}
				checkRepair(t, fs, lost)
			})
		}
	}
}

// changedRecords returns the LSNs of the records of recs whose bytes
// differ between orig and damaged (cut short counts as changed).
func changedRecords(recs []recLoc, orig, damaged []byte) []LSN {
	var out []LSN
	for _, r := range recs {
		end := r.off + r.size
		if end > int64(len(damaged)) || !bytes.Equal(orig[r.off:end], damaged[r.off:end]) {
			out = append(out, r.lsn)
		}
	}
	return out
}

// checkLSNs checks that got holds every golden record but those in lost,
// in order, with their payloads.
func checkLSNs(t *testing.T, got []replayed, lost []LSN) {
	t.Helper()
	i := 0
	for lsn := LSN(1); lsn <= goldenRecords; lsn++ {
		if slices.Contains(lost, lsn) {
			continue
		}
		if i >= len(got) || got[i].lsn != lsn || !bytes.Equal(got[i].rec, payload(int(lsn))) {
			t.Fatalf("replayed %d records; record %d missing or wrong (lost: %v)", len(got), lsn, lost)
		}
		i++
	}
	if i != len(got) {
		t.Fatalf("replayed %d records, want %d (lost: %v)", len(got), i, lost)
	}
}

// checkRepair runs Check and Repair on the damaged log: Check names the
// damage, Repair drops exactly the records lost, and the log then opens,
// replays every other record and takes new ones after the last.
func checkRepair(t *testing.T, fs vfs.FS, lost []LSN) {
	t.Helper()
	rep, err := Check(fs, testDir, 0)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if len(rep.Refused()) == 0 {
		t.Fatalf("Check found no damage Open refuses: %+v", rep)
	}
	after, err := Repair(fs, testDir, 0, rep)
	if err != nil {
		t.Fatalf("Repair: %v", err)
	}
	if len(after.Damage) != 0 {
		t.Fatalf("damage after Repair: %v", after.Damage)
	}
	if after.Records != goldenRecords-len(lost) {
		t.Fatalf("Check after Repair counts %d records, want %d", after.Records, goldenRecords-len(lost))
	}
	w := mustOpen(t, fs, Options{SegmentSize: goldenSegment})
	checkLSNs(t, replayAll(t, w, 1), lost)
	if lsn := appendWait(t, w, Durable, payload(goldenRecords+1))[0]; lsn != goldenRecords+1 {
		t.Fatalf("Append after Repair got LSN %d, want %d", lsn, goldenRecords+1)
	}
	mustClose(t, w)
	w = mustOpen(t, fs, Options{SegmentSize: goldenSegment})
	defer mustClose(t, w)
	got := replayAll(t, w, 1)
	checkLSNs(t, got[:len(got)-1], lost)
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

// TestMissingMiddleFile checks that a gap between files is corruption, and
// that Repair bridges it with a skip record for the missing records.
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
	var lost []LSN
	for lsn := mustParse(t, fs, files[1]); lsn < mustParse(t, fs, files[2]); lsn++ {
		lost = append(lost, lsn)
	}
	if ce.FirstLSN != lost[0] || ce.LastLSN != lost[len(lost)-1] {
		t.Fatalf("CorruptError names records %d–%d as lost, want %d–%d", ce.FirstLSN, ce.LastLSN, lost[0], lost[len(lost)-1])
	}
	checkRepair(t, fs, lost)
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
