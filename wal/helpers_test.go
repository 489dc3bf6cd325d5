package wal

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testDir = "/wal"

// logBuf collects a WAL's log so tests can check what repairs report.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// mustOpen opens dir on fs with opts (FS and a quiet logger filled in).
func mustOpen(t testing.TB, fs vfs.FS, opts Options) *WAL {
	t.Helper()
	opts.FS = fs
	if opts.Logger == nil {
		opts.Logger = discardLogger()
	}
	w, err := Open(testDir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return w
}

func mustClose(t testing.TB, w *WAL) {
	t.Helper()
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// payload is the test record for seq: its length and bytes vary with seq.
func payload(seq int) []byte {
	p := make([]byte, (seq*37)%300)
	for i := range p {
		p[i] = byte(seq + i)
	}
	return fmt.Appendf(p, "#%d", seq)
}

// appendWait appends recs in order and waits for all completions; every
// one must succeed and LSNs must be consecutive.
func appendWait(t testing.TB, w *WAL, class Class, recs ...[]byte) []LSN {
	t.Helper()
	errs := make(chan error, len(recs))
	lsns := make([]LSN, len(recs))
	for i, r := range recs {
		lsns[i] = w.Append(r, class, func(_ LSN, err error) { errs <- err })
		if i > 0 && lsns[i] != lsns[i-1]+1 {
			t.Fatalf("LSN %d after %d", lsns[i], lsns[i-1])
		}
	}
	for range recs {
		if err := <-errs; err != nil {
			t.Fatalf("append completed with %v", err)
		}
	}
	return lsns
}

// appendSeq appends payload(from) … payload(to) as Durable records.
func appendSeq(t testing.TB, w *WAL, from, to int) {
	t.Helper()
	var recs [][]byte
	for i := from; i <= to; i++ {
		recs = append(recs, payload(i))
	}
	appendWait(t, w, Durable, recs...)
}

type replayed struct {
	lsn LSN
	rec []byte
}

func replayAll(t testing.TB, w *WAL, from LSN) []replayed {
	t.Helper()
	var out []replayed
	err := w.Replay(from, func(lsn LSN, rec []byte) error {
		out = append(out, replayed{lsn, slices.Clone(rec)})
		return nil
	})
	if err != nil {
		t.Fatalf("Replay(%d): %v", from, err)
	}
	return out
}

// checkSeq checks that got is exactly LSNs from … to holding payload(lsn).
func checkSeq(t testing.TB, got []replayed, from, to int) {
	t.Helper()
	if len(got) != max(to-from+1, 0) {
		t.Fatalf("replayed %d records, want %d (LSN %d … %d)", len(got), to-from+1, from, to)
	}
	for i, r := range got {
		want := from + i
		if r.lsn != LSN(want) || !bytes.Equal(r.rec, payload(want)) {
			t.Fatalf("record %d: LSN %d %q, want LSN %d %q", i, r.lsn, r.rec, want, payload(want))
		}
	}
}

// walFiles lists the log files in testDir, oldest first.
func walFiles(t testing.TB, fs vfs.FS) []string {
	t.Helper()
	firsts, err := listFiles(fs, testDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range firsts {
		out = append(out, fs.PathJoin(testDir, fileName(f)))
	}
	return out
}

func readFile(t testing.TB, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeFile replaces path's content with b (a shorter b truncates).
func writeFile(t testing.TB, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	// MemFS's Write scribbles over its argument in race builds.
	if _, err := f.Write(slices.Clone(b)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// recLoc is where a record sits in a file.
type recLoc struct {
	lsn       LSN
	off, size int64
}

// layout decodes a file independently of the reader: its records, in order.
func layout(t testing.TB, fs vfs.FS, path string) []recLoc {
	t.Helper()
	b := readFile(t, fs, path)
	var out []recLoc
	for off := fileHeaderSize; off < len(b); {
		h, _, n, err := decodeRecord(b[off:])
		if err != nil {
			break
		}
		out = append(out, recLoc{h.lsn, int64(off), int64(n)})
		off += n
	}
	return out
}

// gateFS blocks or fails fsyncs of log files on demand and reports them.
type gateFS struct {
	*errorfs.FS
	block   atomic.Bool   // block the next fsyncs until release
	failing atomic.Bool   // fail fsyncs
	failW   atomic.Bool   // fail writes
	entered chan struct{} // an fsync is blocked (capacity 1)
	release chan struct{} // close to let blocked fsyncs go on
	synced  chan struct{} // an fsync of a log file ran (capacity 1, lossy)
	syncs   atomic.Int64  // fsyncs of log files attempted
}

func newGateFS(inner vfs.FS) *gateFS {
	g := &gateFS{
		entered: make(chan struct{}, 1),
		release: make(chan struct{}),
		synced:  make(chan struct{}, 1),
	}
	g.FS = errorfs.Wrap(inner, errorfs.InjectorFunc(g.inject))
	return g
}

func (g *gateFS) inject(op errorfs.Op) error {
	if !strings.HasSuffix(op.Path, fileSuffix) {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileWriteAt, errorfs.OpFileWrite:
		if g.failW.Load() {
			return errorfs.ErrInjected
		}
	case errorfs.OpFileSync, errorfs.OpFileSyncData:
		g.syncs.Add(1)
		if g.block.Load() {
			select {
			case g.entered <- struct{}{}:
			default:
			}
			<-g.release
		}
		if g.failing.Load() {
			return errorfs.ErrInjected
		}
		select {
		case g.synced <- struct{}{}:
		default:
		}
	}
	return nil
}

// waitReserve runs Reserve in the background; the channel yields its result.
func waitReserve(w *WAL, n int) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- w.Reserve(context.Background(), n) }()
	return ch
}
