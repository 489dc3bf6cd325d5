package wal

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
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
// life's records after it is damage, as in any file; the earlier life's
// records after it are not.
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
	var logs logBuf
	opts.Logger = logs.logger()
	w = mustOpen(t, fs, opts)
	defer mustClose(t, w)
	if !bytes.Contains([]byte(logs.String()), []byte("intact records after")) && !bytes.Contains([]byte(logs.String()), []byte("intact_records_after")) {
		t.Fatalf("a zeroed record header before live records was not reported:\n%s", logs.String())
	}
	got := replayAll(t, w, recs[0].lsn)
	if len(got) != 1 || got[0].lsn != recs[0].lsn {
		t.Fatalf("replayed %d records from LSN %d, want only that one", len(got), recs[0].lsn)
	}
}

// TestCrashWithRecycledFiles is TestCrashKeepsConfirmedRecords with files
// reused while records are appended (the crash comes once three were):
// every record confirmed at or above
// the last removal's LSN survives a crash, and the records replayed are a
// gapless run with the contents appended.
func TestCrashWithRecycledFiles(t *testing.T) {
	for _, unsynced := range []int{0, 50, 100} {
		for seed := range 4 {
			t.Run(fmt.Sprintf("unsynced=%d%%/seed=%d", unsynced, seed), func(t *testing.T) {
				crashWhileRecycling(t, unsynced, uint64(seed))
			})
		}
	}
}

func crashWhileRecycling(t *testing.T, unsyncedPercent int, seed uint64) {
	fs := vfs.NewCrashableMem()
	opts := Options{SegmentSize: 4096}
	w := mustOpen(t, fs, opts)
	var (
		mu       sync.Mutex
		appended = map[LSN][]byte{}
		acked    = map[LSN]bool{}
		maxAcked LSN
		crashing bool
		cut      LSN        // the highest LSN a RemoveBefore was called with
		removing sync.Mutex // held by the checkpointer around each RemoveBefore
		enough   = make(chan struct{})
		progress = make(chan struct{}, 1)
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	const crashAfter = 1500
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				rec := fmt.Appendf(nil, "g%d-%d-%s", g, i, bytes.Repeat([]byte{'y'}, (i*29+g*11)%150))
				lsn := w.Append(rec, Durable, func(lsn LSN, err error) {
					if err != nil {
						t.Errorf("LSN %d: %v", lsn, err)
						return
					}
					mu.Lock()
					acked[lsn] = true
					maxAcked = max(maxAcked, lsn)
					if len(acked) >= crashAfter && w.recycled.Load() >= 3 && !crashing {
						crashing = true
						close(enough)
					}
					mu.Unlock()
					select {
					case progress <- struct{}{}:
					default:
					}
				})
				mu.Lock()
				appended[lsn] = rec
				mu.Unlock()
			}
		}()
	}
	// The checkpointer: removes what lies 100 records below the highest
	// confirmed one, after every confirmation it sees.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-progress:
			}
			removing.Lock()
			mu.Lock()
			c := max(cut, maxAcked-min(maxAcked, 100))
			cut = c
			mu.Unlock()
			err := w.RemoveBefore(c)
			removing.Unlock()
			if err != nil {
				t.Errorf("RemoveBefore(%d): %v", c, err)
				return
			}
		}
	}()

	<-enough
	removing.Lock() // no removal between reading cut and the crash
	mu.Lock()
	confirmed := make([]LSN, 0, len(acked))
	for lsn := range acked {
		confirmed = append(confirmed, lsn)
	}
	cutAtCrash := cut
	mu.Unlock()
	crashed := fs.CrashClone(vfs.CrashCloneCfg{
		UnsyncedDataPercent: unsyncedPercent,
		RNG:                 rand.New(rand.NewPCG(seed, 2)),
	})
	removing.Unlock()
	close(stop)
	wg.Wait()
	mustClose(t, w)

	w = mustOpen(t, crashed, opts)
	defer mustClose(t, w)
	files := walFiles(t, crashed)
	first, _ := parseFileName(crashed.PathBase(files[0]))
	got := replayAll(t, w, first)
	survived := map[LSN]bool{}
	for i, r := range got {
		if r.lsn != first+LSN(i) {
			t.Fatalf("replayed LSN %d at position %d from %d: not a gapless run", r.lsn, i, first)
		}
		if !bytes.Equal(r.rec, appended[r.lsn]) {
			t.Fatalf("LSN %d replayed as %q, appended as %q", r.lsn, r.rec, appended[r.lsn])
		}
		survived[r.lsn] = true
	}
	if first > cutAtCrash && cutAtCrash > 0 {
		// RemoveBefore(cut) removes only files wholly below cut.
		t.Fatalf("the first file on disk starts at LSN %d, above the last removal's %d", first, cutAtCrash)
	}
	for _, lsn := range confirmed {
		if lsn >= cutAtCrash && !survived[lsn] {
			t.Fatalf("confirmed LSN %d lost in the crash (%d records survived from %d)", lsn, len(got), first)
		}
	}
	last := first + LSN(len(got)) - 1
	if lsn := appendWait(t, w, Durable, []byte("after"))[0]; lsn != last+1 {
		t.Fatalf("Append after the crash got LSN %d, want %d", lsn, last+1)
	}
}
