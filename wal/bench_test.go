package wal

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkAppendSync measures confirmed appends on a real disk: each of
// many goroutines appends a record and waits for its completion, as a
// publisher waiting for its confirm does, so group commit shows in
// fsyncs/op. Files are removed as the benchmark goes, as checkpoints would.
func BenchmarkAppendSync(b *testing.B) {
	for _, policy := range []SyncPolicy{SyncFsync, SyncInterval, SyncNone} {
		for _, size := range []int{128, 1 << 10, 16 << 10} {
			b.Run(fmt.Sprintf("%s/%s", policy, sizeName(size)), func(b *testing.B) {
				benchAppend(b, policy, size)
			})
		}
	}
}

func sizeName(n int) string {
	if n >= 1<<10 {
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func benchAppend(b *testing.B, policy SyncPolicy, size int) {
	w, err := Open(b.TempDir(), Options{Sync: policy, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	rec := make([]byte, size)
	for i := range rec {
		rec[i] = byte(i)
	}
	base := w.Stats()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.SetParallelism(16) // 16 publishers per core
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		done := make(chan error, 1)
		confirm := func(_ LSN, err error) { done <- err }
		for pb.Next() {
			if err := w.Reserve(ctx, encodedSize(size)); err != nil {
				b.Error(err)
				return
			}
			lsn := w.Append(rec, Durable, confirm)
			if err := <-done; err != nil {
				b.Error(err)
				return
			}
			if lsn%8192 == 0 {
				if err := w.RemoveBefore(lsn); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
	b.StopTimer()
	st := w.Stats()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(st.Syncs-base.Syncs)/float64(b.N), "fsyncs/op")
}

// BenchmarkReadAt reads records by LSN from a log on a real disk (in the
// page cache). hot: the records of one file, whose handle ReadAt keeps
// open; cold: each read from another of more files than ReadAt keeps
// open, so every read opens and closes its file. Random LSNs, so each read
// walks from its index entry.
func BenchmarkReadAt(b *testing.B) {
	for _, mode := range []string{"hot", "cold"} {
		for _, size := range []int{128, 1 << 10, 16 << 10} {
			b.Run(fmt.Sprintf("%s/%s", mode, sizeName(size)), func(b *testing.B) {
				benchReadAt(b, mode == "cold", size)
			})
		}
	}
}

func benchReadAt(b *testing.B, cold bool, size int) {
	const seg = 4 << 20
	w, err := Open(b.TempDir(), Options{Sync: SyncNone, SegmentSize: seg, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	files := 1
	if cold {
		files = readHandles + 2
	}
	perFile := (seg - fileHeaderSize) / encodedSize(size)
	rec := make([]byte, size)
	errs := make(chan error, 1)
	for range perFile*files - 1 {
		w.Append(rec, Durable, nil)
	}
	w.Append(rec, Durable, func(_ LSN, err error) { errs <- err })
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	if got := w.Stats().Files; got < files {
		b.Fatalf("%d files, want %d", got, files)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	var dst []byte
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		// Cold: file i%files, a record in it; hot: file 0.
		f := 0
		if cold {
			f = i % files
		}
		lsn := LSN(f*perFile + rng.IntN(perFile) + 1)
		var err error
		if dst, _, err = w.ReadAt(lsn, dst[:0]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
}
