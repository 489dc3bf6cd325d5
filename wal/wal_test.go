package wal

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestRoundTrip(t *testing.T) {
	fs := vfs.NewMem()
	w := mustOpen(t, fs, Options{SegmentSize: 4096})
	appendSeq(t, w, 1, 300)
	if got := w.LastLSN(); got != 300 {
		t.Fatalf("LastLSN = %d, want 300", got)
	}
	st := w.Stats()
	if st.Records != 300 || st.Files < 3 {
		t.Fatalf("Stats = %+v, want 300 records in several files", st)
	}
	mustClose(t, w)

	w = mustOpen(t, fs, Options{SegmentSize: 4096})
	defer mustClose(t, w)
	if got := w.LastLSN(); got != 300 {
		t.Fatalf("LastLSN after reopen = %d, want 300", got)
	}
	checkSeq(t, replayAll(t, w, 1), 1, 300)
	if got := w.Stats(); got.Files != st.Files || got.Bytes != st.Bytes {
		t.Fatalf("Stats after reopen = %+v, before close %+v", got, st)
	}
}

func TestLSNsContinueAcrossReopen(t *testing.T) {
	fs := vfs.NewMem()
	w := mustOpen(t, fs, Options{SegmentSize: 1024})
	appendSeq(t, w, 1, 20)
	mustClose(t, w)
	files := len(walFiles(t, fs))

	// A reopen without appends creates no file.
	w = mustOpen(t, fs, Options{SegmentSize: 1024})
	mustClose(t, w)
	if got := len(walFiles(t, fs)); got != files {
		t.Fatalf("reopen changed the file count from %d to %d", files, got)
	}

	w = mustOpen(t, fs, Options{SegmentSize: 1024})
	if got := w.LastLSN(); got != 20 {
		t.Fatalf("LastLSN = %d, want 20", got)
	}
	if lsn := appendWait(t, w, Durable, payload(21))[0]; lsn != 21 {
		t.Fatalf("first Append after reopen got LSN %d, want 21", lsn)
	}
	appendSeq(t, w, 22, 40)
	mustClose(t, w)

	w = mustOpen(t, fs, Options{SegmentSize: 1024})
	defer mustClose(t, w)
	checkSeq(t, replayAll(t, w, 1), 1, 40)
}

func TestReplayFrom(t *testing.T) {
	fs := vfs.NewMem()
	w := mustOpen(t, fs, Options{SegmentSize: 2048})
	appendSeq(t, w, 1, 200)
	mustClose(t, w)

	w = mustOpen(t, fs, Options{SegmentSize: 2048})
	defer mustClose(t, w)
	checkSeq(t, replayAll(t, w, 137), 137, 200)
	checkSeq(t, replayAll(t, w, 0), 1, 200)
	checkSeq(t, replayAll(t, w, 200), 200, 200)
	checkSeq(t, replayAll(t, w, 201), 201, 200)

	stop := errors.New("stop")
	var n int
	err := w.Replay(1, func(LSN, []byte) error {
		n++
		if n == 5 {
			return stop
		}
		return nil
	})
	if err != stop || n != 5 {
		t.Fatalf("Replay with a failing fn: err %v after %d records, want %v after 5", err, n, stop)
	}

	appendWait(t, w, Durable, payload(201))
	if err := w.Replay(1, func(LSN, []byte) error { return nil }); !errors.Is(err, ErrReplayAfterAppend) {
		t.Fatalf("Replay after Append = %v, want ErrReplayAfterAppend", err)
	}
}

func TestVolatileRecordsAreSkipped(t *testing.T) {
	fs := vfs.NewMem()
	w := mustOpen(t, fs, Options{})
	want := map[LSN][]byte{}
	for i := 1; i <= 30; i++ {
		class := Durable
		if i%3 == 0 {
			class = Volatile
		}
		lsn := appendWait(t, w, class, payload(i))[0]
		if class == Durable {
			want[lsn] = payload(i)
		}
	}
	mustClose(t, w)

	w = mustOpen(t, fs, Options{})
	defer mustClose(t, w)
	got := replayAll(t, w, 1)
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want the %d durable ones", len(got), len(want))
	}
	for _, r := range got {
		if !bytes.Equal(r.rec, want[r.lsn]) {
			t.Fatalf("LSN %d: %q, want %q", r.lsn, r.rec, want[r.lsn])
		}
	}
	var classes []Class
	err := w.ReplayClasses(1, func(lsn LSN, c Class, rec []byte) error {
		if lsn != LSN(len(classes)+1) || !bytes.Equal(rec, payload(int(lsn))) {
			t.Fatalf("ReplayClasses: LSN %d %q, want LSN %d %q", lsn, rec, len(classes)+1, payload(len(classes)+1))
		}
		classes = append(classes, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(classes) != 30 || classes[2] != Volatile || classes[3] != Durable {
		t.Fatalf("ReplayClasses: classes %v, want every record, every third Volatile", classes)
	}
	if lsn := appendWait(t, w, Durable, nil)[0]; lsn != 31 {
		t.Fatalf("LSN after reopen = %d, want 31: Volatile records take LSNs too", lsn)
	}
}

func TestCompletionsRunInLSNOrder(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncFsync, SyncInterval, SyncNone} {
		t.Run(policy.String(), func(t *testing.T) {
			w := mustOpen(t, vfs.NewMem(), Options{Sync: policy, SegmentSize: 8192})
			const goroutines, each = 8, 300
			var (
				order []LSN // appended to on the WAL goroutine only
				wg    sync.WaitGroup
				all   sync.WaitGroup
			)
			all.Add(goroutines * each)
			done := func(lsn LSN, err error) {
				if err != nil {
					t.Errorf("LSN %d completed with %v", lsn, err)
				}
				order = append(order, lsn)
				all.Done()
			}
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var prev LSN
					for i := range each {
						class := Durable
						if (g+i)%4 == 0 {
							class = Volatile
						}
						lsn := w.Append(payload(i), class, done)
						if lsn <= prev {
							t.Errorf("LSN %d after %d on one goroutine", lsn, prev)
						}
						prev = lsn
					}
				}()
			}
			wg.Wait()
			all.Wait()
			mustClose(t, w)
			if len(order) != goroutines*each {
				t.Fatalf("%d completions, want %d", len(order), goroutines*each)
			}
			for i, lsn := range order {
				if lsn != LSN(i+1) {
					t.Fatalf("completion %d is LSN %d, want %d", i, lsn, i+1)
				}
			}
		})
	}
}

// TestGroupCommit holds the writer in an fsync while appenders queue records:
// all of them must share the next fsync.
func TestGroupCommit(t *testing.T) {
	g := newGateFS(vfs.NewMem())
	w := mustOpen(t, g, Options{})
	defer mustClose(t, w)
	base := w.Stats().Syncs

	g.block.Store(true)
	first := make(chan error, 1)
	w.Append(payload(0), Durable, func(_ LSN, err error) { first <- err })
	<-g.entered // the writer is in the fsync for the first record

	const n = 100
	var appended, completed sync.WaitGroup
	appended.Add(n)
	completed.Add(n)
	for i := range n {
		go func() {
			defer appended.Done()
			w.Append(payload(i), Durable, func(_ LSN, err error) {
				if err != nil {
					t.Errorf("completed with %v", err)
				}
				completed.Done()
			})
		}()
	}
	appended.Wait()
	g.block.Store(false)
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	completed.Wait()
	st := w.Stats()
	if got := st.Syncs - base; got != 2 {
		t.Fatalf("%d fsyncs for 1+%d records, want 2 (one group while the first fsync ran)", got, n)
	}
	if st.Records != n+1 {
		t.Fatalf("Records = %d, want %d", st.Records, n+1)
	}
}

// TestGroupCommitOnDisk runs publishers that each wait for their confirm, as
// AMQP publishers with confirms do, against a real disk.
func TestGroupCommitOnDisk(t *testing.T) {
	w, err := Open(t.TempDir(), Options{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, w)
	const goroutines, each = 16, 50
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan error, 1)
			for i := range each {
				w.Append(payload(i), Durable, func(_ LSN, err error) { done <- err })
				if err := <-done; err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := w.Stats()
	if st.Records != goroutines*each || st.Syncs >= st.Records {
		t.Fatalf("Stats = %+v: want %d records and fewer fsyncs than records", st, goroutines*each)
	}
	t.Logf("%d records, %d fsyncs", st.Records, st.Syncs)
}

func TestSyncPolicies(t *testing.T) {
	t.Run("none syncs on Sync, rotation and Close only", func(t *testing.T) {
		fs := vfs.NewMem()
		w := mustOpen(t, fs, Options{Sync: SyncNone, SegmentSize: 1 << 20})
		base := w.Stats().Syncs
		appendSeq(t, w, 1, 50)
		if got := w.Stats().Syncs - base; got != 0 {
			t.Fatalf("%d fsyncs under SyncNone before Sync", got)
		}
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
		if got := w.Stats().Syncs - base; got != 1 {
			t.Fatalf("%d fsyncs after Sync, want 1", got)
		}
		if err := w.Sync(); err != nil { // nothing new: no fsync
			t.Fatal(err)
		}
		if got := w.Stats().Syncs - base; got != 1 {
			t.Fatalf("%d fsyncs after a second Sync with nothing written, want 1", got)
		}
		mustClose(t, w)
	})
	t.Run("interval syncs without a caller", func(t *testing.T) {
		g := newGateFS(vfs.NewMem())
		w := mustOpen(t, g, Options{Sync: SyncInterval, SyncInterval: time.Millisecond})
		defer mustClose(t, w)
		select { // drain the fsyncs of Open
		case <-g.synced:
		default:
		}
		appendWait(t, w, Durable, payload(1)) // done after the write
		select {
		case <-g.synced:
		case <-time.After(10 * time.Second):
			t.Fatal("no fsync within 10s under a 1ms SyncInterval")
		}
	})
	t.Run("parse", func(t *testing.T) {
		for _, p := range []SyncPolicy{SyncFsync, SyncInterval, SyncNone} {
			got, err := ParseSyncPolicy(p.String())
			if err != nil || got != p {
				t.Fatalf("ParseSyncPolicy(%q) = %v, %v", p.String(), got, err)
			}
			var u SyncPolicy
			text, _ := p.MarshalText()
			if err := u.UnmarshalText(text); err != nil || u != p {
				t.Fatalf("text round trip of %v gave %v, %v", p, u, err)
			}
		}
		if _, err := ParseSyncPolicy("always"); err == nil {
			t.Fatal("ParseSyncPolicy accepted \"always\"")
		}
	})
}

func TestReserve(t *testing.T) {
	g := newGateFS(vfs.NewMem())
	w := mustOpen(t, g, Options{MaxPending: 1000})

	if err := w.Reserve(context.Background(), 5000); err != nil {
		t.Fatalf("Reserve above MaxPending with nothing pending: %v", err)
	}
	g.block.Store(true)
	w.Append(payload(1), Durable, nil)
	<-g.entered // written; the writer waits in fsync, so what follows stays pending
	for i := range 10 {
		w.Append(make([]byte, 100), Durable, nil)
		_ = i
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Reserve(cancelled, 100); !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve over the limit with a cancelled context = %v, want context.Canceled", err)
	}
	waiting := waitReserve(w, 100)
	g.block.Store(false)
	close(g.release)
	if err := <-waiting; err != nil {
		t.Fatalf("Reserve after the writer caught up: %v", err)
	}
	mustClose(t, w)
	if err := w.Reserve(context.Background(), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Reserve after Close = %v, want ErrClosed", err)
	}
}

func TestAfterClose(t *testing.T) {
	fs := vfs.NewMem()
	w := mustOpen(t, fs, Options{SyncInterval: time.Hour, Sync: SyncInterval})
	appendSeq(t, w, 1, 3)
	mustClose(t, w)
	mustClose(t, w) // idempotent

	done := make(chan error, 1)
	if lsn := w.Append([]byte("late"), Durable, func(lsn LSN, err error) {
		if lsn != 0 {
			err = errors.New("done got an LSN after Close")
		}
		done <- err
	}); lsn != 0 {
		t.Fatalf("Append after Close returned LSN %d, want 0", lsn)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("done after Close got %v, want ErrClosed", err)
	}
	for name, err := range map[string]error{
		"Sync":         w.Sync(),
		"Replay":       w.Replay(1, func(LSN, []byte) error { return nil }),
		"RemoveBefore": w.RemoveBefore(2),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if w.LastLSN() != 3 {
		t.Fatalf("LastLSN after Close = %d, want 3", w.LastLSN())
	}
	// Close under SyncInterval synced what the interval had not yet.
	w = mustOpen(t, fs, Options{})
	defer mustClose(t, w)
	checkSeq(t, replayAll(t, w, 1), 1, 3)
}

func TestLockIsExclusive(t *testing.T) {
	fs := vfs.NewMem()
	w := mustOpen(t, fs, Options{})
	if _, err := Open(testDir, Options{FS: fs, Logger: discardLogger()}); err == nil {
		t.Fatal("a second Open of an open log succeeded")
	}
	mustClose(t, w)
	mustClose(t, mustOpen(t, fs, Options{}))
}

func TestLargeRecordGetsAFileOfItsOwn(t *testing.T) {
	fs := vfs.NewMem()
	w := mustOpen(t, fs, Options{SegmentSize: 1024})
	big := bytes.Repeat([]byte("B"), 5000)
	appendWait(t, w, Durable, payload(1), payload(2))
	appendWait(t, w, Durable, big)        // LSN 3: a new file, sized to fit
	appendWait(t, w, Durable, big)        // LSN 4: another
	appendWait(t, w, Durable, payload(5)) // back to SegmentSize files
	mustClose(t, w)

	files := walFiles(t, fs)
	wantNames := []string{fileName(1), fileName(3), fileName(4), fileName(5)}
	if len(files) != len(wantNames) {
		t.Fatalf("files %v, want %v", files, wantNames)
	}
	for i, f := range files {
		if !strings.HasSuffix(f, wantNames[i]) {
			t.Fatalf("files %v, want %v", files, wantNames)
		}
	}
	if got := len(readFile(t, fs, files[1])); got != fileHeaderSize+encodedSize(len(big)) {
		t.Fatalf("big record file is %d bytes, want %d", got, fileHeaderSize+encodedSize(len(big)))
	}

	w = mustOpen(t, fs, Options{SegmentSize: 1024})
	defer mustClose(t, w)
	got := replayAll(t, w, 1)
	if len(got) != 5 || !bytes.Equal(got[2].rec, big) || !bytes.Equal(got[3].rec, big) || !bytes.Equal(got[4].rec, payload(5)) {
		t.Fatalf("replay after big records went wrong: %d records", len(got))
	}
}

func TestRemoveBefore(t *testing.T) {
	fs := vfs.NewMem()
	w := mustOpen(t, fs, Options{SegmentSize: 1024})
	appendSeq(t, w, 1, 100)
	files := walFiles(t, fs)
	if len(files) < 5 {
		t.Fatalf("only %d files; the test needs several", len(files))
	}
	firsts := make([]LSN, len(files))
	for i, f := range files {
		firsts[i], _ = parseFileName(fs.PathBase(f))
	}

	// An LSN inside file 2 removes files 0 and 1 only: file 2 still holds
	// records at or above it.
	cut := firsts[2] + 1
	if err := w.RemoveBefore(cut); err != nil {
		t.Fatal(err)
	}
	if got := walFiles(t, fs); len(got) != len(files)-2 || got[0] != files[2] {
		t.Fatalf("after RemoveBefore(%d): %v, want %v", cut, got, files[2:])
	}
	if w.FirstLSN() != firsts[2] {
		t.Fatalf("FirstLSN %d after the removal, want file 2's first, %d", w.FirstLSN(), firsts[2])
	}
	// The first LSN of file 3 removes file 2: all its records are below.
	if err := w.RemoveBefore(firsts[3]); err != nil {
		t.Fatal(err)
	}
	if got := walFiles(t, fs); got[0] != files[3] {
		t.Fatalf("after RemoveBefore(%d): first file %s, want %s", firsts[3], got[0], files[3])
	}
	// Beyond everything: only the file being written stays.
	if err := w.RemoveBefore(w.LastLSN() + 100); err != nil {
		t.Fatal(err)
	}
	left := walFiles(t, fs)
	if len(left) != 1 || left[0] != files[len(files)-1] || w.Stats().Files != 1 {
		t.Fatalf("after RemoveBefore beyond the end: %v (Stats.Files %d), want only %s",
			left, w.Stats().Files, files[len(files)-1])
	}
	appendSeq(t, w, 101, 120)
	mustClose(t, w)

	w = mustOpen(t, fs, Options{SegmentSize: 1024})
	defer mustClose(t, w)
	lastFirst := firsts[len(firsts)-1]
	checkSeq(t, replayAll(t, w, lastFirst), int(lastFirst), 120)
	if w.FirstLSN() != lastFirst {
		t.Fatalf("FirstLSN %d after a reopen, want %d", w.FirstLSN(), lastFirst)
	}
	if err := w.Replay(1, func(LSN, []byte) error { return nil }); !errors.Is(err, ErrRemoved) {
		t.Fatalf("Replay from a removed LSN = %v, want ErrRemoved", err)
	}
}

func TestFileNames(t *testing.T) {
	for _, lsn := range []LSN{1, 2, 0xabc, 1 << 40, ^LSN(0)} {
		name := fileName(lsn)
		if len(name) != fileNameLen {
			t.Fatalf("fileName(%d) = %q: not fixed width", lsn, name)
		}
		if got, ok := parseFileName(name); !ok || got != lsn {
			t.Fatalf("parseFileName(fileName(%d)) = %d, %v", lsn, got, ok)
		}
	}
	if fileName(9) >= fileName(10) || fileName(0xff) >= fileName(0x100) {
		t.Fatal("file names do not sort by LSN")
	}
	for _, bad := range []string{
		"0000000000000000.wal", // LSN 0
		"000000000000000A.wal", // upper case
		"00000000000000a.wal",  // short
		"0000000000000001.log",
		"0000000000000001.wal.tmp",
		"+000000000000001.wal",
		"LOCK2", "", "x",
	} {
		if _, ok := parseFileName(bad); ok {
			t.Errorf("parseFileName accepted %q", bad)
		}
	}
}

func TestOpenRejectsForeignFiles(t *testing.T) {
	fs := vfs.NewMem()
	mustClose(t, mustOpen(t, fs, Options{}))
	writeFile(t, fs, fs.PathJoin(testDir, "notes.txt"), []byte("hi"))
	if _, err := listFiles(fs, testDir); err == nil || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("listFiles with a foreign file = %v, want an error naming it", err)
	}
	if _, err := Open(testDir, Options{FS: fs, Logger: discardLogger()}); err == nil || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("Open with a foreign file = %v, want an error naming it", err)
	}
}

func TestOpenOptions(t *testing.T) {
	if _, err := Open(testDir, Options{FS: vfs.NewMem(), SegmentSize: 10}); err == nil {
		t.Fatal("Open accepted a 10-byte segment size")
	}
	if _, err := Open(testDir, Options{FS: vfs.NewMem(), Sync: SyncPolicy(9)}); err == nil {
		t.Fatal("Open accepted sync policy 9")
	}
}

// TestAfterGroupRunsAfterEachGroupsCompletions: AfterGroup runs on the
// WAL's goroutine once per group, after every completion of that group.
func TestAfterGroupRunsAfterEachGroupsCompletions(t *testing.T) {
	var done, groups int // only the WAL's goroutine touches them
	var seenAtGroup []int
	opts := Options{AfterGroup: func() {
		groups++
		seenAtGroup = append(seenAtGroup, done)
	}}
	w := mustOpen(t, vfs.NewMem(), opts)
	const n = 200
	for i := range n {
		w.Append([]byte("rec"+strconv.Itoa(i)), Durable, func(LSN, error) { done++ })
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if groups == 0 || groups > n+1 {
		t.Fatalf("AfterGroup ran %d times for %d records", groups, n)
	}
	if last := seenAtGroup[len(seenAtGroup)-1]; last != n {
		t.Fatalf("after the last group %d of %d completions had run", last, n)
	}
	for i := 1; i < len(seenAtGroup); i++ {
		if seenAtGroup[i] < seenAtGroup[i-1] {
			t.Fatalf("completions went backwards between groups: %v", seenAtGroup)
		}
	}
}
