package wal

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestRecycledFiles: files RemoveBefore is done with are reused for later
// ones, and a reused file's earlier records, left after the new ones, are
// never replayed, after a reopen, when it is the last file (appended to
// again) and when it is not; its new records all are.
func TestRecycledFiles(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{SegmentSize: 4096}
	w := mustOpen(t, fs, opts)
	appendSeq(t, w, 1, 200)
	// Recycle the oldest files and write past them, a few records at a
	// time, so that reused files end short of their earlier records.
	next := 201
	for round := range 6 {
		if err := w.RemoveBefore(LSN(next - 40)); err != nil {
			t.Fatal(err)
		}
		n := 13 + round*7
		appendSeq(t, w, next, next+n-1)
		next += n
	}
	if w.Stats().Recycled == 0 {
		t.Fatal("no file was reused")
	}
	first := func() LSN {
		files := walFiles(t, fs)
		f, _ := parseFileName(fs.PathBase(files[0]))
		return f
	}
	mustClose(t, w)

	for reopen := range 3 {
		w = mustOpen(t, fs, opts)
		checkSeq(t, replayAll(t, w, first()), int(first()), next-1)
		appendSeq(t, w, next, next+4)
		next += 5
		if reopen == 1 {
			if err := w.RemoveBefore(LSN(next - 3)); err != nil {
				t.Fatal(err)
			}
			appendSeq(t, w, next, next+60)
			next += 61
		}
		mustClose(t, w)
	}
	w = mustOpen(t, fs, opts)
	defer mustClose(t, w)
	checkSeq(t, replayAll(t, w, first()), int(first()), next-1)
}

// TestRecycledFileDamage: in a reused file, a zero record header with this
// life's records after it is damage, as in any file (Open refuses it, and
// Repair drops the one record); the earlier life's records after it are
// not.
func TestRecycledFileDamage(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{SegmentSize: 4096}
	w := mustOpen(t, fs, opts)
	appendSeq(t, w, 1, 100)
	if err := w.RemoveBefore(90); err != nil {
		t.Fatal(err)
	}
	appendSeq(t, w, 101, 130)
	if w.Stats().Recycled == 0 {
		t.Fatal("no file was reused")
	}
	mustClose(t, w)
	files := walFiles(t, fs)
	recycled := files[len(files)-1]
	recs := layout(t, fs, recycled)
	if len(recs) < 3 {
		t.Fatalf("the reused file holds %d records; the test needs 3", len(recs))
	}
	// Zero the second record's header: the third comes after it.
	b := readFile(t, fs, recycled)
	clear(b[recs[1].off : recs[1].off+recordHeaderSize])
	writeFile(t, fs, recycled, b)
	opts.FS, opts.Logger = fs, discardLogger()
	_, err := Open(testDir, opts)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.FirstLSN != recs[1].lsn || ce.LastLSN != recs[1].lsn || ce.NextLSN != recs[2].lsn {
		t.Fatalf("Open = %v, want a *CorruptError losing only record %d", err, recs[1].lsn)
	}
	rep, err := Check(fs, testDir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Repair(fs, testDir, 0, rep); err != nil {
		t.Fatalf("Repair: %v", err)
	}
	w = mustOpen(t, fs, opts)
	defer mustClose(t, w)
	got := replayAll(t, w, recs[0].lsn)
	if len(got) != 130-int(recs[0].lsn) || got[0].lsn != recs[0].lsn || got[1].lsn != recs[2].lsn || got[len(got)-1].lsn != 130 {
		t.Fatalf("replayed %d records from LSN %d, want all to 130 but %d", len(got), recs[0].lsn, recs[1].lsn)
	}
}

// TestCrashWithRecycledFiles is TestCrashKeepsConfirmedRecords with files
// reused while records are appended (crashWhileAppending with recycle).
func TestCrashWithRecycledFiles(t *testing.T) {
	for _, unsynced := range []int{0, 50, 100} {
		for seed := range 4 {
			t.Run(fmt.Sprintf("unsynced=%d%%/seed=%d", unsynced, seed), func(t *testing.T) {
				crashWhileAppending(t, unsynced, uint64(seed), true)
			})
		}
	}
}
