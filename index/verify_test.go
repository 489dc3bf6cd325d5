package index

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// damagedIndex writes 20,000 entry keys into an index on a MemFS, flushes
// them into sstables, closes it, flips a byte in the middle of the largest
// sstable and returns the fs, the index directory and that file.
func damagedIndex(t *testing.T) (*vfs.MemFS, string, string) {
	t.Helper()
	fs := vfs.NewMem()
	const dir = "idx"
	db, err := Open(dir, fs, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	val := bytes.Repeat([]byte("v"), 40)
	for i := range 20000 {
		if err := b.Set(EntryKey(nil, uint64(i%7), 0, uint64(i)), val, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var sst string
	var size int64
	for _, n := range names {
		if !strings.HasSuffix(n, ".sst") {
			continue
		}
		st, err := fs.Stat(fs.PathJoin(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > size {
			sst, size = fs.PathJoin(dir, n), st.Size()
		}
	}
	if sst == "" {
		t.Fatal("no sstable written")
	}
	data := readAll(t, fs, sst)
	data[len(data)/3] ^= 0x10
	f, err := fs.Create(sst, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return fs, dir, sst
}

func readAll(t *testing.T, fs vfs.FS, path string) []byte {
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

func sums(t *testing.T, fs vfs.FS, dir string) map[string][32]byte {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][32]byte{}
	for _, n := range names {
		out[n] = sha256.Sum256(readAll(t, fs, fs.PathJoin(dir, n)))
	}
	return out
}

// TestVerifyFindsDamagedTable: Verify reads every block of every table and
// names the damaged one, with what it holds, without writing anything.
func TestVerifyFindsDamagedTable(t *testing.T) {
	fs, dir, sst := damagedIndex(t)
	before := sums(t, fs, dir)
	reports, err := Verify(fs, dir)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	bad := Damaged(reports)
	if len(bad) != 1 || bad[0].File != sst || !strings.Contains(bad[0].Bounds, "entry queue") {
		t.Fatalf("Verify found %v, want %s damaged, holding entries", bad, sst)
	}
	if !strings.Contains(bad[0].Error(), sst) {
		t.Errorf("error %q does not name the file", bad[0])
	}
	if after := sums(t, fs, dir); len(after) != len(before) {
		t.Fatalf("Verify changed the directory: %d files, then %d", len(before), len(after))
	} else {
		for n, s := range before {
			if after[n] != s {
				t.Fatalf("Verify changed %s", n)
			}
		}
	}
}

// TestCorruptionIsAnErrorNotACrash: a read that meets a damaged block gets
// an error and OnCorruption's callback is told the file; the process does
// not die (Pebble's default, Logger.Fatalf, panicked here, and a broker
// serving from the index exited at the first read of the block).
func TestCorruptionIsAnErrorNotACrash(t *testing.T) {
	fs, dir, sst := damagedIndex(t)
	opts := Options(fs, 1<<20)
	var mu sync.Mutex
	var reported []*CorruptionError
	OnCorruption(opts, func(ce *CorruptionError) {
		mu.Lock()
		reported = append(reported, ce)
		mu.Unlock()
	})
	db, err := pebble.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	err = it.Close()
	if err == nil || n >= 20000 {
		t.Fatalf("a scan over a damaged block read %d keys and ended with %v, want an error", n, err)
	}
	var ce *CorruptionError
	if !errors.As(FromPebble(dir, err), &ce) || ce.File != sst {
		t.Fatalf("FromPebble(%v) = %v, want a *CorruptionError naming %s", err, FromPebble(dir, err), sst)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.ContainsFunc(reported, func(c *CorruptionError) bool { return c.File == sst }) {
		t.Fatalf("OnCorruption reported %v, want %s", reported, sst)
	}
}

// BenchmarkVerify checks an index of 6M entry keys (several tables) on
// disk; -cpu 1,2 shows the tables checked on every core at once.
func BenchmarkVerify(b *testing.B) {
	dir := b.TempDir()
	db, err := Open(dir, vfs.Default, 64<<20)
	if err != nil {
		b.Fatal(err)
	}
	val := bytes.Repeat([]byte("v"), 24)
	for chunk := range 60 {
		batch := db.NewBatch()
		for i := range 100_000 {
			seq := uint64(chunk*100_000 + i)
			if err := batch.Set(EntryKey(nil, seq%16, 0, seq), val, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			b.Fatal(err)
		}
		if err := db.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var bytes uint64
	var tables int
	for b.Loop() {
		reports, err := Verify(vfs.Default, dir)
		if err != nil || len(Damaged(reports)) > 0 {
			b.Fatal(err, Damaged(reports))
		}
		bytes, tables = 0, len(reports)
		for _, r := range reports {
			bytes += r.Size
		}
	}
	b.SetBytes(int64(bytes))
	b.ReportMetric(float64(tables), "tables")
}
