package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// sized is the test record for seq with n bytes: every byte depends on seq,
// so a record read from the wrong place never passes for it.
func sized(seq, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(seq*7 + i + i>>8)
	}
	if n >= 8 {
		binary.LittleEndian.PutUint64(p, uint64(seq))
	}
	return p
}

// testRec is a record a test appended, to compare ReadAt with.
type testRec struct {
	payload []byte
	class   Class
}

// mixedRecords returns n records of sizes that exercise the index: mostly
// small (several index entries per file when files are large), every 50th
// around indexStride or beyond readWindow (a second read), every 200th
// larger than a 64 KiB file; every 7th Volatile.
func mixedRecords(n int) []testRec {
	out := make([]testRec, n)
	for i := range out {
		seq := i + 1
		size := (seq * 37) % 300
		switch {
		case seq%200 == 0:
			size = 70 << 10
		case seq%50 == 0:
			size = indexStride - 10 + seq%3*(readWindow-indexStride+20)
		}
		class := Durable
		if seq%7 == 0 {
			class = Volatile
		}
		out[i] = testRec{sized(seq, size), class}
	}
	return out
}

// appendRecs appends recs, which must get the LSNs from first on, and
// waits for their completions.
func appendRecs(t testing.TB, w *WAL, first LSN, recs []testRec) {
	t.Helper()
	errs := make(chan error, len(recs))
	for i, r := range recs {
		if lsn := w.Append(r.payload, r.class, func(_ LSN, err error) { errs <- err }); lsn != first+LSN(i) {
			t.Fatalf("Append got LSN %d, want %d", lsn, first+LSN(i))
		}
	}
	for range recs {
		if err := <-errs; err != nil {
			t.Fatalf("append completed with %v", err)
		}
	}
}

// checkReadAt reads every LSN of want (want[i] has LSN first+i) and
// checks payload and class, appending to a dst with a prefix that must
// stay as it was.
func checkReadAt(t testing.TB, w *WAL, first LSN, want []testRec) {
	t.Helper()
	prefix := []byte("prefix")
	var dst []byte
	for i, r := range want {
		lsn := first + LSN(i)
		dst = append(dst[:0], prefix...)
		got, class, err := w.ReadAt(lsn, dst)
		if err != nil {
			t.Fatalf("ReadAt(%d): %v", lsn, err)
		}
		if !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], r.payload) || class != r.class {
			t.Fatalf("ReadAt(%d) = %d bytes of class %s, want %d of class %s", lsn, len(got)-len(prefix), class, len(r.payload), r.class)
		}
		dst = got
	}
}

// TestReadAtEveryRecord: every record appended is read back by its LSN,
// whatever its size and class, in files of several index entries and in
// files smaller than one, while the log runs and after a reopen (found by
// Open: Volatile ones too, as they are on disk); LSNs beyond the last
// written are ErrNotWritten, LSN 0 is an error, and after Close every read
// is ErrClosed.
func TestReadAtEveryRecord(t *testing.T) {
	for _, seg := range []int64{4096, 128 << 10} {
		t.Run(fmt.Sprint(seg), func(t *testing.T) {
			fs := vfs.NewMem()
			opts := Options{SegmentSize: seg}
			w := mustOpen(t, fs, opts)
			recs := mixedRecords(1000)
			appendRecs(t, w, 1, recs)
			checkReadAt(t, w, 1, recs)
			if st := w.Stats(); st.Files < 5 {
				t.Fatalf("%d files; the test wants several", st.Files)
			}
			checkIndexBound(t, w)
			for _, lsn := range []LSN{1001, 1002, 5000} {
				if _, _, err := w.ReadAt(lsn, nil); !errors.Is(err, ErrNotWritten) {
					t.Fatalf("ReadAt(%d) beyond the end = %v, want ErrNotWritten", lsn, err)
				}
			}
			if _, _, err := w.ReadAt(0, nil); err == nil || errors.Is(err, ErrRemoved) || errors.Is(err, ErrNotWritten) {
				t.Fatalf("ReadAt(0) = %v, want an error of its own", err)
			}
			mustClose(t, w)
			if _, _, err := w.ReadAt(1, nil); !errors.Is(err, ErrClosed) {
				t.Fatalf("ReadAt after Close = %v, want ErrClosed", err)
			}

			w = mustOpen(t, fs, opts)
			defer mustClose(t, w)
			checkReadAt(t, w, 1, recs)
			checkIndexBound(t, w)
			more := mixedRecords(1300)[1000:]
			appendRecs(t, w, 1001, more)
			checkReadAt(t, w, 1, append(slices.Clone(recs), more...))
		})
	}
}

// checkIndexBound checks the memory the doc promises: a file's index has
// at most one entry per indexStride bytes, plus its first.
func checkIndexBound(t testing.TB, w *WAL) {
	t.Helper()
	w.filesMu.Lock()
	defer w.filesMu.Unlock()
	for _, fm := range w.files {
		if max := fm.size/indexStride + 1; int64(len(fm.index)) > max {
			t.Fatalf("%s: %d index entries for %d bytes, want at most %d", fm.path, len(fm.index), fm.size, max)
		}
	}
}

// TestReadAtRemovedAndRecycled: records of files RemoveBefore removed are
// ErrRemoved, those of the files left are read, including the files
// started from the spare (a recycled file's earlier records, after its
// new ones, are never read: a LSN beyond the last written is
// ErrNotWritten, not an old record), and a file whose handle ReadAt had
// open is not read after it was recycled.
func TestReadAtRemovedAndRecycled(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{SegmentSize: 4096}
	w := mustOpen(t, fs, opts)
	defer mustClose(t, w)
	var all []testRec
	add := func(n int) {
		recs := make([]testRec, n)
		for i := range recs {
			seq := len(all) + i + 1
			recs[i] = testRec{sized(seq, 40+seq%90), Durable}
		}
		appendRecs(t, w, LSN(len(all)+1), recs)
		all = append(all, recs...)
	}
	add(200)
	for round := range 6 {
		// Read the oldest file first, so its handle is cached when it
		// is removed and its file recycled.
		first := firstLSN(t, w)
		if _, _, err := w.ReadAt(first, nil); err != nil {
			t.Fatal(err)
		}
		files := walFiles(t, fs) // all but the last two go
		if err := w.RemoveBefore(mustParse(t, fs, files[len(files)-2])); err != nil {
			t.Fatal(err)
		}
		add(90 + round*7)
		floor := firstLSN(t, w)
		if floor <= first {
			t.Fatalf("round %d: RemoveBefore removed nothing", round)
		}
		for lsn := LSN(1); lsn < floor; lsn++ {
			if _, _, err := w.ReadAt(lsn, nil); !errors.Is(err, ErrRemoved) {
				t.Fatalf("round %d: ReadAt(%d) below the first file (LSN %d) = %v, want ErrRemoved", round, lsn, floor, err)
			}
		}
		checkReadAt(t, w, floor, all[floor-1:])
		last := LSN(len(all))
		if _, _, err := w.ReadAt(last+1, nil); !errors.Is(err, ErrNotWritten) {
			t.Fatalf("ReadAt(%d) = %v, want ErrNotWritten", last+1, err)
		}
	}
	if w.Stats().Recycled == 0 {
		t.Fatal("no file was reused")
	}
}

// firstLSN is the first LSN of the oldest file of w.
func firstLSN(t testing.TB, w *WAL) LSN {
	t.Helper()
	w.filesMu.Lock()
	defer w.filesMu.Unlock()
	return w.files[0].first
}

// TestReadAtRemovedUnderRead: a ReadAt that is reading a file when
// RemoveBefore removes it, and the file is reused for new records before
// the read completes, returns ErrRemoved, not damage and never the new
// records' bytes.
func TestReadAtRemovedUnderRead(t *testing.T) {
	var armed atomic.Pointer[string]
	entered, release := make(chan struct{}), make(chan struct{})
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if p := armed.Load(); op.Kind == errorfs.OpFileReadAt && p != nil && op.Path == *p {
			armed.Store(nil)
			close(entered)
			<-release
		}
		return nil
	}))
	w := mustOpen(t, fs, Options{SegmentSize: 4096})
	defer mustClose(t, w)
	appendSeq(t, w, 1, 100)
	files := walFiles(t, fs)
	armed.Store(&files[0])
	type result struct {
		rec []byte
		err error
	}
	res := make(chan result, 1)
	go func() {
		rec, _, err := w.ReadAt(5, nil)
		res <- result{rec, err}
	}()
	<-entered
	if err := w.RemoveBefore(mustParse(t, fs, files[1])); err != nil {
		t.Fatal(err)
	}
	if !w.SpareReady() {
		t.Fatal("the removed file was not kept as the spare")
	}
	for n := 101; w.Stats().Recycled == 0; n++ {
		appendSeq(t, w, n, n)
	}
	close(release)
	r := <-res
	if !errors.Is(r.err, ErrRemoved) {
		t.Fatalf("ReadAt of a file recycled under it = %q, %v; want ErrRemoved", r.rec, r.err)
	}
}

// TestReadAtDamage applies every damage of TestCorruption that keeps a
// file's length, to the last file and an earlier one, under an open log:
// each record is read as appended or reported as damage (a *CorruptError),
// never as other bytes; the damaged records are damage, the records before
// the damage and in other files are read. Reopened with the damage
// covered (Open steps over it) and after Repair (skip records in its
// place), the records lost are damage and every other is read.
func TestReadAtDamage(t *testing.T) {
	gold := golden(t)
	for _, c := range corruptCases(t, gold) {
		for _, target := range []string{"last", "earlier"} {
			files := walFiles(t, gold)
			path := files[len(files)-1]
			if target == "earlier" {
				path = files[len(files)-2]
			}
			recs := layout(t, gold, path)
			orig := readFile(t, gold, path)
			damaged, _ := c.damage(slices.Clone(orig), recs)
			if len(damaged) != len(orig) {
				continue // a torn write that cut the file: Open's business
			}
			t.Run(target+"/"+c.name, func(t *testing.T) {
				fs := vfs.NewMem()
				if _, err := vfs.Clone(gold, fs, testDir, testDir); err != nil {
					t.Fatal(err)
				}
				lost := changedRecords(recs, orig, damaged)

				w := mustOpen(t, fs, Options{SegmentSize: goldenSegment})
				for lsn := LSN(1); lsn <= goldenRecords; lsn++ {
					_, _, _ = w.ReadAt(lsn, nil) // cache the handles: the damage must be seen through them too
				}
				overwrite(t, fs, path, damaged)
				firstDamaged := LSN(goldenRecords + 1)
				if len(lost) > 0 {
					firstDamaged = lost[0]
				}
				for lsn := LSN(1); lsn <= goldenRecords; lsn++ {
					in := lsn >= recs[0].lsn && lsn <= recs[len(recs)-1].lsn
					mustRead := !in || lsn < firstDamaged
					checkDamagedRead(t, w, lsn, slices.Contains(lost, lsn), mustRead)
				}
				mustClose(t, w)

				if target == "last" && c.torn {
					// Open drops the torn tail: what is before it is
					// read, what it dropped is not written.
					w := mustOpen(t, fs, Options{SegmentSize: goldenSegment})
					defer mustClose(t, w)
					for lsn := LSN(1); lsn <= goldenRecords; lsn++ {
						_, _, err := w.ReadAt(lsn, nil)
						if lsn > w.LastLSN() && !errors.Is(err, ErrNotWritten) {
							t.Fatalf("ReadAt(%d) of a record Open dropped = %v, want ErrNotWritten", lsn, err)
						}
						if lsn <= w.LastLSN() {
							checkDamagedRead(t, w, lsn, false, true)
						}
					}
					return
				}
				var ce *CorruptError
				if _, err := Open(testDir, Options{FS: fs, SegmentSize: goldenSegment, Logger: discardLogger()}); !errors.As(err, &ce) {
					t.Fatalf("Open of the damaged log = %v, want a *CorruptError", err)
				}
				if !(ce.Header && target == "last") {
					covered := recs[len(recs)-1].lsn
					if len(lost) > 0 && !ce.Header {
						covered = lost[len(lost)-1]
					}
					w := mustOpen(t, fs, Options{SegmentSize: goldenSegment, Covered: covered})
					for lsn := LSN(1); lsn <= goldenRecords; lsn++ {
						isLost := slices.Contains(lost, lsn)
						checkDamagedRead(t, w, lsn, isLost, !isLost)
					}
					mustClose(t, w)
				}
				rep, err := Check(fs, testDir, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := Repair(fs, testDir, 0, rep); err != nil {
					t.Fatalf("Repair: %v", err)
				}
				w = mustOpen(t, fs, Options{SegmentSize: goldenSegment})
				defer mustClose(t, w)
				for lsn := LSN(1); lsn <= goldenRecords; lsn++ {
					isLost := slices.Contains(lost, lsn)
					checkDamagedRead(t, w, lsn, isLost, !isLost)
				}
			})
		}
	}
}

// checkDamagedRead reads lsn of the golden log: its payload or a
// *CorruptError, the one if mustRead, the other if mustFail.
func checkDamagedRead(t *testing.T, w *WAL, lsn LSN, mustFail, mustRead bool) {
	t.Helper()
	got, _, err := w.ReadAt(lsn, nil)
	var ce *CorruptError
	switch {
	case err == nil && !bytes.Equal(got, payload(int(lsn))):
		t.Fatalf("ReadAt(%d) returned bytes that are not the record's: %q", lsn, got)
	case err != nil && !errors.As(err, &ce):
		t.Fatalf("ReadAt(%d) = %v, want the record or a *CorruptError", lsn, err)
	case err == nil && mustFail:
		t.Fatalf("ReadAt(%d) read a damaged record", lsn)
	case err != nil && mustRead:
		t.Fatalf("ReadAt(%d) of an intact record = %v", lsn, err)
	}
}

// overwrite writes b over the file at path in place (same file, not a new
// one: a handle open on it sees the change).
func overwrite(t testing.TB, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(slices.Clone(b), 0); err != nil {
		t.Fatal(err)
	}
}

// TestReadAtFailed: once a write failed, ReadAt returns the sticky error,
// for records written before it too.
func TestReadAtFailed(t *testing.T) {
	g := newGateFS(vfs.NewMem())
	w := mustOpen(t, g, Options{})
	appendSeq(t, w, 1, 10)
	if _, _, err := w.ReadAt(3, nil); err != nil {
		t.Fatal(err)
	}
	g.failW.Store(true)
	errs := make(chan error, 1)
	w.Append(payload(11), Durable, func(_ LSN, err error) { errs <- err })
	if err := <-errs; !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("append = %v, want the injected error", err)
	}
	if _, _, err := w.ReadAt(3, nil); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("ReadAt after a failed write = %v, want the sticky error", err)
	}
	if err := w.Close(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Close = %v, want the sticky error", err)
	}
}

// countFS counts the files opened for reading that are still open and the
// bytes read from them.
type countFS struct {
	vfs.FS
	open atomic.Int64
	read atomic.Int64
}

type countFile struct {
	vfs.File
	fs *countFS
}

func (c *countFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := c.FS.Open(name, opts...)
	if err != nil {
		return nil, err
	}
	c.open.Add(1)
	return &countFile{f, c}, nil
}

func (f *countFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.fs.read.Add(int64(n))
	return n, err
}

func (f *countFile) Close() error {
	f.fs.open.Add(-1)
	return f.File.Close()
}

// TestReadAtBounds: reads keep at most readHandles files open however many
// files they visit, none of a file removed nor after Close, and read at most readWindow bytes
// besides the payload: no whole file for one record.
func TestReadAtBounds(t *testing.T) {
	fs := &countFS{FS: vfs.NewMem()}
	opts := Options{SegmentSize: 512 << 10}
	w := mustOpen(t, fs, opts)
	recs := make([]testRec, 30000)
	for i := range recs {
		recs[i] = testRec{sized(i+1, (i*37)%300), Durable}
	}
	appendRecs(t, w, 1, recs)
	files := walFiles(t, fs)
	if len(files) < readHandles+3 {
		t.Fatalf("%d files, the test wants more than %d", len(files), readHandles+2)
	}
	w.filesMu.Lock()
	entries := len(w.files[0].index)
	w.filesMu.Unlock()
	if entries < 10 {
		t.Fatalf("%d index entries in the first file; the test wants a file of many", entries)
	}
	// Every file in turn, from each one's last record back, so each read
	// walks as far as it can.
	rng := rand.New(rand.NewPCG(1, 2))
	for k := range 3000 {
		lsn := LSN(rng.IntN(len(recs)) + 1)
		if k%2 == 0 {
			lsn = LSN((k*len(recs)/len(files))%len(recs) + 1)
		}
		before := fs.read.Load()
		got, _, err := w.ReadAt(lsn, nil)
		if err != nil || !bytes.Equal(got, recs[lsn-1].payload) {
			t.Fatalf("ReadAt(%d) = %d bytes, %v", lsn, len(got), err)
		}
		if n := fs.read.Load() - before; n > int64(readWindow+len(got)) {
			t.Fatalf("ReadAt(%d) read %d bytes, more than a window (%d) and its %d-byte payload", lsn, n, readWindow, len(got))
		}
		if n := fs.open.Load(); n > readHandles {
			t.Fatalf("%d files open for reading after a ReadAt, want at most %d", n, readHandles)
		}
	}
	// RemoveBefore closes what ReadAt had open of the files it removes:
	// the last file's handle at most stays.
	if err := w.RemoveBefore(w.LastLSN() + 1); err != nil {
		t.Fatal(err)
	}
	if n := fs.open.Load(); n > 1 {
		t.Fatalf("%d files open for reading after RemoveBefore left one file", n)
	}
	mustClose(t, w)
	if n := fs.open.Load(); n != 0 {
		t.Fatalf("%d files open for reading after Close", n)
	}
}

// TestReadAtConcurrent: a writer appends while readers read random written
// LSNs and RemoveBefore trims the front; every read returns exactly the
// record appended, or ErrRemoved for an LSN below one RemoveBefore was
// given.
func TestReadAtConcurrent(t *testing.T) {
	fs := vfs.NewMem()
	w := mustOpen(t, fs, Options{SegmentSize: 8192})
	defer mustClose(t, w)
	const total, burst = 6000, 8
	class := func(lsn LSN) Class {
		if lsn%5 == 0 {
			return Volatile
		}
		return Durable
	}
	var written, removeArg atomic.Uint64
	progress := make(chan struct{}, 1) // a reader did some reads
	removeCh := make(chan struct{}, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup

	wg.Add(1)
	go func() { // the remover
		defer wg.Done()
		for range removeCh {
			x := max(written.Load(), 300) - 300
			if x > removeArg.Load() {
				removeArg.Store(x)
			}
			if err := w.RemoveBefore(LSN(x)); err != nil {
				t.Errorf("RemoveBefore(%d): %v", x, err)
			}
		}
	}()
	var reads, removed atomic.Int64
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			var dst []byte
			failed := false // report the first wrong read, and go on reading: the writer waits for progress
			fail := func(format string, args ...any) {
				if !failed {
					t.Errorf(format, args...)
				}
				failed = true
			}
			for n := 1; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				hi := written.Load()
				if hi == 0 {
					continue
				}
				lo := max(removeArg.Load(), 201) - 200
				lsn := LSN(lo + rng.Uint64N(hi-lo+1))
				got, c, err := w.ReadAt(lsn, dst[:0])
				switch {
				case err == nil:
					if !bytes.Equal(got, payload(int(lsn))) || c != class(lsn) {
						fail("ReadAt(%d) = %d bytes of class %s, not the record appended", lsn, len(got), c)
					}
					dst = got
				case errors.Is(err, ErrRemoved):
					if arg := removeArg.Load(); uint64(lsn) >= arg {
						fail("ReadAt(%d) = %v, but RemoveBefore was given at most %d", lsn, err, arg)
					}
					removed.Add(1)
				default:
					fail("ReadAt(%d): %v", lsn, err)
				}
				reads.Add(1)
				if n%20 == 0 {
					select {
					case progress <- struct{}{}:
					default:
					}
				}
			}
		}()
	}

	errs := make(chan error, burst)
	for next := 1; next <= total; next += burst {
		for lsn := next; lsn < next+burst; lsn++ {
			w.Append(payload(lsn), class(LSN(lsn)), func(_ LSN, err error) { errs <- err })
		}
		for range burst {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		written.Store(uint64(next + burst - 1))
		if next%400 == 1 {
			select {
			case removeCh <- struct{}{}:
			default:
			}
		}
		if next%80 == 1 {
			<-progress // the readers keep up: they read while the log moves
		}
	}
	close(done)
	close(removeCh)
	wg.Wait()
	t.Logf("%d reads, %d of them of removed records", reads.Load(), removed.Load())

	// The end state, without races: below the oldest file is removed,
	// the rest is read.
	floor := firstLSN(t, w)
	if floor == 1 {
		t.Fatal("nothing was removed")
	}
	if _, _, err := w.ReadAt(floor-1, nil); !errors.Is(err, ErrRemoved) {
		t.Fatalf("ReadAt(%d) = %v, want ErrRemoved", floor-1, err)
	}
	for lsn := floor; lsn <= total; lsn++ {
		if got, _, err := w.ReadAt(lsn, nil); err != nil || !bytes.Equal(got, payload(int(lsn))) {
			t.Fatalf("ReadAt(%d) = %d bytes, %v", lsn, len(got), err)
		}
	}
}

// FuzzReadAt appends records of the sizes and classes the input says, with
// RemoveBefore in between, then checks that ReadAt reads every record as
// appended (ErrRemoved below the first file, ErrNotWritten beyond the
// last), before and after a reopen, and, after a byte of a file is
// flipped, reads every record as appended or reports damage: never other
// bytes.
func FuzzReadAt(f *testing.F) {
	f.Add([]byte{10, 0, 200, 1, 0, 30, 2, 80, 10, 3}, uint16(0), uint32(100))
	f.Add(bytes.Repeat([]byte{0xff, 0x7f, 0x01}, 20), uint16(1), uint32(40000))
	f.Add([]byte("records of every size, removed and recycled"), uint16(3), uint32(7))
	f.Fuzz(func(t *testing.T, ops []byte, flipFile uint16, flipOff uint32) {
		if len(ops) > 96 {
			ops = ops[:96]
		}
		fs := vfs.NewMem()
		opts := Options{SegmentSize: 8192}
		w := mustOpen(t, fs, opts)
		var all []testRec
		for i := 0; i+1 < len(ops); i += 2 {
			op, n := ops[i], int(ops[i+1])
			if op == 0xff {
				if err := w.RemoveBefore(LSN(len(all) * n / 256)); err != nil {
					t.Fatal(err)
				}
				continue
			}
			size := n * (1 + int(op>>4)*15) // up to 58 KiB: records beyond a window and a file
			class := Durable
			if op&1 == 1 {
				class = Volatile
			}
			r := testRec{sized(len(all)+1, size), class}
			appendRecs(t, w, LSN(len(all)+1), []testRec{r})
			all = append(all, r)
		}
		check := func(w *WAL) LSN {
			floor := firstLSN(t, w)
			for lsn := LSN(1); lsn < floor; lsn++ {
				if _, _, err := w.ReadAt(lsn, nil); !errors.Is(err, ErrRemoved) {
					t.Fatalf("ReadAt(%d) below the first file = %v, want ErrRemoved", lsn, err)
				}
			}
			checkReadAt(t, w, floor, all[floor-1:])
			if _, _, err := w.ReadAt(LSN(len(all)+1), nil); !errors.Is(err, ErrNotWritten) {
				t.Fatalf("ReadAt beyond the end = %v, want ErrNotWritten", err)
			}
			return floor
		}
		check(w)
		mustClose(t, w)
		w = mustOpen(t, fs, opts)
		defer mustClose(t, w)
		floor := check(w)

		files := walFiles(t, fs)
		path := files[int(flipFile)%len(files)]
		b := readFile(t, fs, path)
		if len(b) == 0 {
			return
		}
		off := int(flipOff) % len(b)
		overwrite(t, fs, path, []byte{b[off] ^ byte(1+flipOff>>24)})
		for lsn := floor; lsn <= LSN(len(all)); lsn++ {
			got, c, err := w.ReadAt(lsn, nil)
			var ce *CorruptError
			switch {
			case err == nil && (!bytes.Equal(got, all[lsn-1].payload) || c != all[lsn-1].class):
				t.Fatalf("ReadAt(%d) after a flipped byte at %s:%d returned other bytes", lsn, path, off)
			case err != nil && !errors.As(err, &ce):
				t.Fatalf("ReadAt(%d) after a flipped byte = %v, want the record or a *CorruptError", lsn, err)
			}
		}
	})
}
