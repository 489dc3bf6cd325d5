package wal

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// flipRecord flips one payload byte of the record at index i of the file
// at path (the records as layout lists them) and returns its LSN.
func flipRecord(t *testing.T, fs vfs.FS, path string, i int) LSN {
	t.Helper()
	recs := layout(t, fs, path)
	b := readFile(t, fs, path)
	r := recs[i]
	b[r.off+r.size-1] ^= 0x40
	writeFile(t, fs, path, b)
	return r.lsn
}

// dirSums returns a checksum of every file in testDir, by name.
func dirSums(t *testing.T, fs vfs.FS) map[string][32]byte {
	t.Helper()
	names, err := fs.List(testDir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][32]byte{}
	for _, n := range names {
		out[n] = sha256.Sum256(readFile(t, fs, fs.PathJoin(testDir, n)))
	}
	return out
}

// TestDamagedTailBeforeCheckpoint: the last record of the last file is
// damaged and nothing follows it, but a checkpoint covers it (it was
// fsync'd, so this is no torn write). Open drops it, as a torn tail, and
// takes the log on past the checkpoint with a skip record: new records
// never reuse an LSN the checkpoint counts as done.
func TestDamagedTailBeforeCheckpoint(t *testing.T) {
	fs := golden(t)
	files := walFiles(t, fs)
	last := files[len(files)-1]
	recs := layout(t, fs, last)
	lsn := flipRecord(t, fs, last, len(recs)-1)
	if lsn != goldenRecords {
		t.Fatalf("flipped record %d, want the last, %d", lsn, goldenRecords)
	}
	// Without the checkpoint it is an ordinary torn tail.
	rep, err := Check(fs, testDir, 0)
	if err != nil || len(rep.Damage) != 1 || !rep.Damage[0].Torn {
		t.Fatalf("Check = %+v, %v; want one torn tail", rep, err)
	}
	covered := LSN(goldenRecords + 5) // records after it were checkpointed too, then removed
	w := mustOpen(t, fs, Options{SegmentSize: goldenSegment, Covered: covered})
	if got := w.LastLSN(); got != covered {
		t.Fatalf("LastLSN = %d, want the checkpoint, %d", got, covered)
	}
	checkSeq(t, replayAll(t, w, 1), 1, goldenRecords-1)
	if got := appendWait(t, w, Durable, payload(int(covered)+1))[0]; got != covered+1 {
		t.Fatalf("Append got LSN %d, want %d", got, covered+1)
	}
	mustClose(t, w)
	w = mustOpen(t, fs, Options{SegmentSize: goldenSegment})
	defer mustClose(t, w)
	got := replayAll(t, w, 1)
	checkSeq(t, got[:len(got)-1], 1, goldenRecords-1)
	if r := got[len(got)-1]; r.lsn != covered+1 || !bytes.Equal(r.rec, payload(int(covered)+1)) {
		t.Fatalf("last record replayed: LSN %d, want %d", r.lsn, covered+1)
	}
}

// TestCoveredDamageStaysCovered: Open steps over damage in records a
// checkpoint holds without writing anything, so the damage is still there
// at the next Open, which steps over it again; appends in between and
// replays across the damage work.
func TestCoveredDamageStaysCovered(t *testing.T) {
	fs := golden(t)
	files := walFiles(t, fs)
	last := files[len(files)-1]
	lsn := flipRecord(t, fs, last, 1)
	before := dirSums(t, fs)
	opts := Options{SegmentSize: goldenSegment, Covered: lsn}
	w := mustOpen(t, fs, opts)
	if got := dirSums(t, fs)[fs.PathBase(last)]; got != before[fs.PathBase(last)] {
		t.Fatal("Open changed the file it stepped over damage in")
	}
	appendSeq(t, w, goldenRecords+1, goldenRecords+40) // into new files too
	mustClose(t, w)
	w = mustOpen(t, fs, opts)
	defer mustClose(t, w)
	got := replayAll(t, w, 1)
	var want []LSN
	for l := LSN(1); l <= goldenRecords+40; l++ {
		if l != lsn {
			want = append(want, l)
		}
	}
	var lsns []LSN
	for _, r := range got {
		lsns = append(lsns, r.lsn)
		if !bytes.Equal(r.rec, payload(int(r.lsn))) {
			t.Fatalf("record %d has the wrong payload", r.lsn)
		}
	}
	if !slices.Equal(lsns, want) {
		t.Fatalf("replayed %v, want every LSN to %d but %d", lsns, goldenRecords+40, lsn)
	}
	// Replay from the checkpoint on, as the store does.
	checkSeq(t, replayAll(t, w, lsn+1), int(lsn)+1, goldenRecords+40)
}

// TestCheckFindsEveryDamageAndWritesNothing: two damaged records in the
// last file and one in an earlier file. Open refuses at the first; Check
// reports all three, each with the records it loses and the intact ones
// after, and changes no byte; Repair drops the three records only.
func TestCheckFindsEveryDamageAndWritesNothing(t *testing.T) {
	fs := golden(t)
	files := walFiles(t, fs)
	last := files[len(files)-1]
	// The later record first: layout stops at damage.
	third := flipRecord(t, fs, last, 3)
	lost := []LSN{flipRecord(t, fs, files[1], 2), flipRecord(t, fs, last, 1), third}
	before := dirSums(t, fs)

	_, err := Open(testDir, Options{FS: fs, SegmentSize: goldenSegment, Logger: discardLogger()})
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.FirstLSN != lost[0] || ce.LastLSN != lost[0] {
		t.Fatalf("Open = %v, want a *CorruptError losing record %d", err, lost[0])
	}
	rep, err := Check(fs, testDir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Damage) != 3 {
		t.Fatalf("Check found %d damages, want 3: %v", len(rep.Damage), rep.Damage)
	}
	for i, d := range rep.Damage {
		if d.FirstLSN != lost[i] || d.LastLSN != lost[i] || d.NextLSN != lost[i]+1 || d.IntactAfter == 0 || d.Torn || d.Covered {
			t.Errorf("damage %d = %+v, want record %d lost and intact records after it", i, d, lost[i])
		}
	}
	if rep.Records != goldenRecords-3 || rep.First != 1 || rep.Last != goldenRecords {
		t.Errorf("Check counts %d records, LSN %d–%d; want %d, 1–%d", rep.Records, rep.First, rep.Last, goldenRecords-3, goldenRecords)
	}
	if after := dirSums(t, fs); !equalSums(before, after) {
		t.Fatal("Open or Check changed the log")
	}
	checkRepair(t, fs, lost)
}

func equalSums(a, b map[string][32]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestRepairRefusesAChangedLog: Repair does nothing when the log's damage
// is not what the report it was given says.
func TestRepairRefusesAChangedLog(t *testing.T) {
	fs := golden(t)
	files := walFiles(t, fs)
	flipRecord(t, fs, files[0], 3)
	rep, err := Check(fs, testDir, 0)
	if err != nil {
		t.Fatal(err)
	}
	flipRecord(t, fs, files[0], 1)
	before := dirSums(t, fs)
	if _, err := Repair(fs, testDir, 0, rep); err == nil {
		t.Fatal("Repair with a stale report succeeded")
	}
	if !equalSums(before, dirSums(t, fs)) {
		t.Fatal("Repair with a stale report changed the log")
	}
}

// TestTornWriteWithLaterPagesWritten: a crash in the middle of a group's
// write can leave a page of it unwritten while later pages reached the
// disk. The unwritten page reads as zeros (a new file) or as the file's
// earlier records (a reused one); either way it is a torn write, not
// damage: Open keeps the records before it and drops the rest, none of
// which was synced.
func TestTornWriteWithLaterPagesWritten(t *testing.T) {
	const page = 4096
	for _, reused := range []bool{false, true} {
		t.Run(map[bool]string{false: "new file", true: "reused file"}[reused], func(t *testing.T) {
			fs := vfs.NewMem()
			opts := Options{SegmentSize: 8 * page}
			w := mustOpen(t, fs, opts)
			next := 1
			var stale []byte // what the reused file held before
			if reused {
				for w.Stats().Files < 3 {
					appendSeq(t, w, next, next)
					next++
				}
				if err := w.RemoveBefore(LSN(next - 1)); err != nil {
					t.Fatal(err)
				}
				stale = readFile(t, fs, fs.PathJoin(testDir, spareName))
				for w.Stats().Recycled == 0 {
					appendSeq(t, w, next, next)
					next++
				}
			}
			// Records well into the third page of the file being written.
			for {
				files := walFiles(t, fs)
				recs := layout(t, fs, files[len(files)-1])
				if len(recs) > 0 && recs[len(recs)-1].off > 2*page+page/2 {
					break
				}
				appendSeq(t, w, next, next)
				next++
			}
			mustClose(t, w)
			files := walFiles(t, fs)
			path := files[len(files)-1]
			recs := layout(t, fs, path)
			first := int(recs[0].lsn)
			b := readFile(t, fs, path)
			if reused {
				copy(b[page:2*page], stale[page:2*page])
			} else {
				clear(b[page : 2*page])
			}
			writeFile(t, fs, path, b)
			keep := first - 1
			for _, r := range recs {
				if r.off+r.size <= page {
					keep = int(r.lsn)
				}
			}
			var logs logBuf
			opts.Logger = logs.logger()
			w = mustOpen(t, fs, opts)
			defer mustClose(t, w)
			if got := w.LastLSN(); got != LSN(keep) {
				t.Fatalf("LastLSN = %d, want %d (the last record before the unwritten page)", got, keep)
			}
			checkSeq(t, replayAll(t, w, LSN(first)), first, keep)
			if !bytes.Contains([]byte(logs.String()), []byte("level=ERROR")) {
				t.Errorf("dropping intact records after a torn write was not logged as an error:\n%s", logs.String())
			}
		})
	}
}
