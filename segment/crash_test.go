package segment

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestCrash writes with several Writers, removes a segment, leaves a last
// Writer unfinished, and crashes (vfs.MemFS.CrashClone keeps what was
// synced and a random part of the rest). After reopening: every blob of a
// finished Writer reads back, the removed segment stays removed, and
// nothing, finished or not, comes back wrong: a blob reads as written or
// fails.
func TestCrash(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			fs := vfs.NewCrashableMem()
			opts := Options{BlockSize: 2 << 10, TargetSize: 8 << 10, Codec: []Codec{CodecS2, CodecNone, CodecZstd}[seed%3]}
			s := openT(t, fs, "segs", opts)

			written := map[Loc][]byte{} // every Loc any writer returned
			var durable []Loc           // those of finished writers
			n := 0
			write := func(count int, finish bool) []Loc {
				w, err := s.NewWriter()
				if err != nil {
					t.Fatal(err)
				}
				var locs []Loc
				for range count {
					blob := testBlob(n, r.IntN(1500))
					n++
					loc, err := w.Add(blob)
					if err != nil {
						t.Fatal(err)
					}
					written[loc] = blob
					locs = append(locs, loc)
				}
				if finish {
					if err := w.Finish(); err != nil {
						t.Fatal(err)
					}
					durable = append(durable, locs...)
				}
				return locs
			}
			write(40, true)
			doomed := write(10, true)
			write(40, true)
			if err := s.Remove(doomed[0].Seg); err != nil {
				t.Fatal(err)
			}
			removed := doomed[0].Seg
			var kept []Loc
			for _, l := range durable {
				if l.Seg != removed {
					kept = append(kept, l)
				}
			}
			durable = kept
			write(10+r.IntN(60), false) // crash before this writer's Finish

			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: r.IntN(101), RNG: r})
			s.Close()

			s2, err := Open("segs", Options{FS: crashed, BlockSize: opts.BlockSize, TargetSize: opts.TargetSize})
			if err != nil {
				t.Fatalf("Open after crash: %v", err)
			}
			defer s2.Close()
			for _, si := range s2.List() {
				if si.ID == removed {
					t.Fatalf("removed segment %d is back", removed)
				}
			}
			for _, loc := range durable {
				got, err := s2.Read(loc, nil)
				if err != nil || !bytes.Equal(got, written[loc]) {
					t.Fatalf("finished blob at %+v lost: %v", loc, err)
				}
			}
			for loc, want := range written {
				got, err := s2.Read(loc, nil)
				var ce *CorruptError
				switch {
				case err == nil:
					if !bytes.Equal(got, want) {
						t.Fatalf("blob at %+v came back wrong", loc)
					}
				case errors.As(err, &ce), errors.Is(err, ErrNotFound):
				default:
					t.Fatalf("blob at %+v: unexpected error %v", loc, err)
				}
			}
			for _, si := range s2.List() {
				err := s2.Scan(si.ID, func(loc Loc, blob []byte) error {
					want, ok := written[loc]
					if !ok || !bytes.Equal(blob, want) {
						t.Fatalf("Scan %d gave %+v, which was never written so", si.ID, loc)
					}
					return nil
				})
				var ce *CorruptError
				if err != nil && !errors.As(err, &ce) {
					t.Fatalf("Scan %d: %v", si.ID, err)
				}
			}
			// The store takes new writes after the crash, in new files.
			w, err := s2.NewWriter()
			if err != nil {
				t.Fatal(err)
			}
			loc, err := w.Add([]byte("after"))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Finish(); err != nil {
				t.Fatal(err)
			}
			for _, si := range s2.List()[:len(s2.List())-1] {
				if si.ID >= loc.Seg {
					t.Fatalf("new segment %d is not above existing %d", loc.Seg, si.ID)
				}
			}
		})
	}
}

// failFS fails the nth operation of a kind on segment files (counting
// from 1) and every later one of that kind, like a disk gone bad.
type failFS struct {
	*errorfs.FS
	kind  errorfs.OpKind
	n     int
	count int
}

func newFailFS(inner vfs.FS, kind errorfs.OpKind, n int) *failFS {
	f := &failFS{kind: kind, n: n}
	f.FS = errorfs.Wrap(inner, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind != f.kind {
			return nil
		}
		f.count++
		if f.n > 0 && f.count >= f.n {
			return errorfs.ErrInjected
		}
		return nil
	}))
	return f
}

// TestWriterFailure fails a write, a sync or a create at various points:
// the error reaches Add or Finish, is sticky, ends the Writer, and the store
// stays usable with what was finished before.
func TestWriterFailure(t *testing.T) {
	cases := []struct {
		kind errorfs.OpKind
		n    int
	}{
		{errorfs.OpFileWrite, 1}, // the first header
		{errorfs.OpFileWrite, 2}, // the first block
		{errorfs.OpFileWrite, 7},
		{errorfs.OpFileWrite, 20},
		{errorfs.OpFileSync, 1}, // at the first roll
		{errorfs.OpFileSync, 3},
		{errorfs.OpCreate, 1},
		{errorfs.OpCreate, 3},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("op%d/%d", tc.kind, tc.n), func(t *testing.T) {
			ffs := newFailFS(vfs.NewMem(), tc.kind, 0)
			s := openT(t, ffs, "segs", smallOpts())
			before := makeBlobs(30, 1, 10)
			beforeLocs := writeBlobs(t, s, before)

			ffs.count, ffs.n = 0, tc.n
			w, err := s.NewWriter()
			if err != nil {
				t.Fatal(err)
			}
			var first error
			for i := range 200 {
				_, err := w.Add(testBlob(i, 700))
				if err != nil {
					first = err
					break
				}
			}
			if first == nil {
				first = w.Finish()
				if first == nil {
					t.Fatalf("no error after %d %v ops", ffs.count, tc.kind)
				}
			} else {
				// Sticky: the next Add and Finish return the same error.
				if _, err := w.Add([]byte("x")); err != first {
					t.Fatalf("Add after %v: %v", first, err)
				}
				if err := w.Finish(); err != first {
					t.Fatalf("Finish after %v: %v", first, err)
				}
			}
			if !errors.Is(first, errorfs.ErrInjected) {
				t.Fatalf("writer error %v does not wrap the injected one", first)
			}
			if err := w.Finish(); err != first {
				t.Fatalf("Finish again: %v, want the sticky %v", err, first)
			}

			// The writer has ended: the store takes a new one and still
			// reads what was finished before. Its files are removable.
			ffs.n = 0
			for _, id := range w.Segments() {
				if err := s.Remove(id); err != nil {
					t.Fatalf("Remove %d of the failed writer: %v", id, err)
				}
			}
			checkBlobs(t, s, beforeLocs, before)
			after := makeBlobs(30, 2, 10)
			afterLocs := writeBlobs(t, s, after)
			checkBlobs(t, s, afterLocs, after)
		})
	}
}

// TestDirSyncFailure fails the directory sync in Finish.
func TestDirSyncFailure(t *testing.T) {
	var fail bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if fail && op.Kind == errorfs.OpFileSync && op.Path == "segs" {
			return errorfs.ErrInjected
		}
		return nil
	}))
	s := openT(t, fs, "segs", smallOpts())
	w, err := s.NewWriter()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Add([]byte("x")); err != nil {
		t.Fatal(err)
	}
	fail = true
	if err := w.Finish(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Finish: %v, want the injected error", err)
	}
	if err := w.Finish(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("second Finish: %v, want the sticky error", err)
	}
}
