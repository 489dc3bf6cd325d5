package segment

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// makeBlobs returns n test blobs of blobSizes, one of them big.
func makeBlobs(n int, seed uint64, big int) [][]byte {
	sizes := blobSizes(n, seed, big)
	blobs := make([][]byte, n)
	for i, sz := range sizes {
		blobs[i] = testBlob(i, sz)
	}
	return blobs
}

// scanAll returns every blob Scan yields for the store's segments, by Loc,
// in order.
func scanAll(t *testing.T, s *Store) ([]Loc, [][]byte) {
	t.Helper()
	var locs []Loc
	var blobs [][]byte
	for _, si := range s.List() {
		err := s.Scan(si.ID, func(loc Loc, blob []byte) error {
			locs = append(locs, loc)
			blobs = append(blobs, slices.Clone(blob))
			return nil
		})
		if err != nil {
			t.Fatalf("Scan %d: %v", si.ID, err)
		}
	}
	return locs, blobs
}

func TestRoundTrip(t *testing.T) {
	fs := vfs.NewMem()
	opts := smallOpts()
	s := openT(t, fs, "segs", opts)
	blobs := makeBlobs(600, 1, 3*opts.BlockSize)
	w, err := s.NewWriter()
	if err != nil {
		t.Fatal(err)
	}
	locs := make([]Loc, len(blobs))
	for i, b := range blobs {
		if locs[i], err = w.Add(b); err != nil {
			t.Fatalf("Add %d: %v", i, err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	segs := w.Segments()
	if len(segs) < 3 {
		t.Fatalf("writer wrote %d segments, want the test to roll files several times", len(segs))
	}
	var listed []ID
	for _, si := range s.List() {
		listed = append(listed, si.ID)
		if si.Size > opts.TargetSize+int64(4*opts.BlockSize)+blockHeaderSize && si.ID != locs[len(blobs)/3].Seg {
			t.Errorf("segment %d is %d bytes, target %d", si.ID, si.Size, opts.TargetSize)
		}
		if si.Valid != si.Size {
			t.Errorf("segment %d: valid %d, size %d", si.ID, si.Valid, si.Size)
		}
	}
	if !slices.Equal(listed, segs) {
		t.Fatalf("List %v, Writer.Segments %v", listed, segs)
	}
	// The big blob is a block of its own.
	big := locs[len(blobs)/3]
	if big.Off != 0 || int(big.Len) != 3*opts.BlockSize {
		t.Errorf("big blob at %+v, want offset 0 of its own block", big)
	}
	if next := locs[len(blobs)/3+1]; next.Seg == big.Seg && next.Block == big.Block {
		t.Errorf("blob after the big one shares its block: %+v", next)
	}
	checkBlobs(t, s, locs, blobs)

	// Scan yields exactly the Locs Add returned, in order.
	scanned, scannedBlobs := scanAll(t, s)
	if !slices.Equal(scanned, locs) {
		t.Fatalf("Scan locs differ from Add locs:\n%v\n%v", scanned[:min(5, len(scanned))], locs[:5])
	}
	for i := range scannedBlobs {
		if !bytes.Equal(scannedBlobs[i], blobs[i]) {
			t.Fatalf("Scan blob %d differs", i)
		}
	}

	// After reopen, and with a second writer appending new files.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, fs, "segs", opts)
	checkBlobs(t, s, locs, blobs)
	more := makeBlobs(50, 2, 10)
	moreLocs := writeBlobs(t, s, more)
	if moreLocs[0].Seg != segs[len(segs)-1]+1 {
		t.Errorf("second writer starts at segment %d, want %d (a new file above the last)", moreLocs[0].Seg, segs[len(segs)-1]+1)
	}
	checkBlobs(t, s, locs, blobs)
	checkBlobs(t, s, moreLocs, more)
}

// blockCodecs returns the codec of every block of every file.
func blockCodecs(t *testing.T, s *Store) []Codec {
	t.Helper()
	var out []Codec
	for _, si := range s.List() {
		sf, err := s.acquire(si.ID)
		if err != nil {
			t.Fatal(err)
		}
		r := newBlockReader(sf.f, sf.path, fileHeaderSize, sf.size.Load())
		for {
			off, _, err := r.next(true)
			if err != nil {
				break
			}
			out = append(out, Codec(r.win[off-r.winOff+16]))
		}
		s.release(sf)
	}
	return out
}

func TestCodecs(t *testing.T) {
	for _, codec := range []Codec{CodecNone, CodecS2, CodecZstd} {
		for _, payload := range []string{"json", "random"} {
			t.Run(codec.String()+"/"+payload, func(t *testing.T) {
				fs := vfs.NewMem()
				opts := Options{Codec: codec, BlockSize: 16 << 10, TargetSize: 64 << 10}
				s := openT(t, fs, "segs", opts)
				r := rand.New(rand.NewPCG(3, 4))
				var blobs [][]byte
				for range 100 {
					size := 100 + r.IntN(2000)
					if payload == "json" {
						blobs = append(blobs, jsonBody(r, size))
					} else {
						blobs = append(blobs, randomBody(r, size))
					}
				}
				locs := writeBlobs(t, s, blobs)
				s.Close()
				s = openT(t, fs, "segs", opts)
				checkBlobs(t, s, locs, blobs)
				want := codec
				if payload == "random" {
					want = CodecNone // compression does not pay: stored raw
				}
				for i, c := range blockCodecs(t, s) {
					if c != want {
						t.Fatalf("block %d has codec %s, want %s", i, c, want)
					}
				}
			})
		}
	}
}

func TestReadMany(t *testing.T) {
	fs := vfs.NewMem()
	s := openT(t, fs, "segs", smallOpts())
	blobs := makeBlobs(300, 5, 9000)
	locs := writeBlobs(t, s, blobs)

	r := rand.New(rand.NewPCG(5, 6))
	var want [][]byte
	var ask []Loc
	for range 200 {
		i := r.IntN(len(locs))
		ask = append(ask, locs[i])
		want = append(want, blobs[i])
	}
	seen := make([]bool, len(ask))
	err := s.ReadMany(ask, func(i int, blob []byte) error {
		if seen[i] {
			t.Errorf("index %d given twice", i)
		}
		seen[i] = true
		if !bytes.Equal(blob, want[i]) {
			t.Errorf("index %d: wrong blob", i)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.Index(seen, false); i >= 0 {
		t.Fatalf("index %d never given", i)
	}

	stop := errors.New("stop")
	calls := 0
	err = s.ReadMany(ask, func(int, []byte) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Fatalf("ReadMany after fn error: %v after %d calls, want the fn error after 1", err, calls)
	}
	if err := s.ReadMany(nil, func(int, []byte) error { return stop }); err != nil {
		t.Fatalf("ReadMany of nothing: %v", err)
	}
}

func TestWriterRules(t *testing.T) {
	fs := vfs.NewMem()
	s := openT(t, fs, "segs", smallOpts())

	w, err := s.NewWriter()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewWriter(); !errors.Is(err, ErrWriterActive) {
		t.Fatalf("second NewWriter: %v, want ErrWriterActive", err)
	}
	// A writer that added nothing leaves no file.
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if l := s.List(); len(l) != 0 {
		t.Fatalf("empty writer left files %v", l)
	}
	if _, err := w.Add([]byte("x")); !errors.Is(err, ErrWriterDone) {
		t.Fatalf("Add after Finish: %v, want ErrWriterDone", err)
	}
	if err := w.Finish(); !errors.Is(err, ErrWriterDone) {
		t.Fatalf("Finish after Finish: %v, want ErrWriterDone", err)
	}

	// While a writer has a segment, it is not readable, scannable or
	// removable; after Finish it is.
	w, err = s.NewWriter()
	if err != nil {
		t.Fatal(err)
	}
	loc, err := w.Add(bytes.Repeat([]byte("a"), 5000)) // cut at once: on disk
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(loc, nil); !errors.Is(err, ErrBusy) {
		t.Fatalf("Read of a segment being written: %v, want ErrBusy", err)
	}
	if err := s.Scan(loc.Seg, func(Loc, []byte) error { return nil }); !errors.Is(err, ErrBusy) {
		t.Fatalf("Scan of a segment being written: %v, want ErrBusy", err)
	}
	if err := s.Remove(loc.Seg); !errors.Is(err, ErrBusy) {
		t.Fatalf("Remove of a segment being written: %v, want ErrBusy", err)
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Read(loc, nil); err != nil || len(got) != 5000 {
		t.Fatalf("Read after Finish: %d bytes, %v", len(got), err)
	}

	// Abort leaves the files, listed and removable, and frees the slot.
	w, err = s.NewWriter()
	if err != nil {
		t.Fatal(err)
	}
	aloc, err := w.Add(bytes.Repeat([]byte("b"), 5000))
	if err != nil {
		t.Fatal(err)
	}
	w.Abort()
	w.Abort()
	if _, err := w.Add(nil); !errors.Is(err, ErrWriterDone) {
		t.Fatalf("Add after Abort: %v, want ErrWriterDone", err)
	}
	if l := s.List(); l[len(l)-1].ID != aloc.Seg {
		t.Fatalf("aborted writer's segment %d not listed: %v", aloc.Seg, l)
	}
	if err := s.Remove(aloc.Seg); err != nil {
		t.Fatalf("Remove of an aborted writer's segment: %v", err)
	}
	if _, err := s.NewWriter(); err != nil {
		t.Fatalf("NewWriter after Abort: %v", err)
	}
}

func TestRemove(t *testing.T) {
	fs := vfs.NewMem()
	s := openT(t, fs, "segs", smallOpts())
	a := makeBlobs(40, 7, 100)
	aLocs := writeBlobs(t, s, a)
	b := makeBlobs(40, 8, 100)
	bLocs := writeBlobs(t, s, b)
	checkBlobs(t, s, aLocs, a)
	checkBlobs(t, s, bLocs, b)
	before := s.CacheStats().Bytes

	seg := aLocs[0].Seg
	if err := s.Remove(seg); err != nil {
		t.Fatal(err)
	}
	if after := s.CacheStats().Bytes; after >= before {
		t.Errorf("cache holds %d bytes after Remove, %d before: the segment's blocks were not dropped", after, before)
	}
	if _, err := s.Read(aLocs[0], nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Read of a removed segment: %v, want ErrNotFound", err)
	}
	if err := s.Scan(seg, func(Loc, []byte) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Scan of a removed segment: %v, want ErrNotFound", err)
	}
	if err := s.Remove(seg); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Remove: %v, want ErrNotFound", err)
	}
	for _, si := range s.List() {
		if si.ID == seg {
			t.Fatalf("removed segment %d still listed", seg)
		}
	}
	if _, err := fs.Stat(fs.PathJoin("segs", fileName(seg))); err == nil {
		t.Fatalf("removed segment's file still exists")
	}
	checkBlobs(t, s, bLocs, b)
	s.Close()
	s = openT(t, fs, "segs", smallOpts())
	checkBlobs(t, s, bLocs, b)
}

func TestScanStops(t *testing.T) {
	fs := vfs.NewMem()
	s := openT(t, fs, "segs", smallOpts())
	locs := writeBlobs(t, s, makeBlobs(50, 9, 10))
	stop := errors.New("stop")
	n := 0
	err := s.Scan(locs[0].Seg, func(Loc, []byte) error {
		n++
		if n == 3 {
			return stop
		}
		return nil
	})
	if err != stop || n != 3 {
		t.Fatalf("Scan: %v after %d blobs, want the fn error after 3", err, n)
	}
}

func TestNextID(t *testing.T) {
	fs := vfs.NewMem()
	s := openT(t, fs, "segs", smallOpts())
	first := writeBlobs(t, s, makeBlobs(5, 1, 10))[0].Seg
	if first != 1 {
		t.Fatalf("first segment is %d, want 1", first)
	}
	second := writeBlobs(t, s, makeBlobs(5, 1, 10))[0].Seg
	if err := s.Remove(first); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, fs, "segs", smallOpts())
	if third := writeBlobs(t, s, makeBlobs(5, 1, 10))[0].Seg; third != second+1 {
		t.Fatalf("segment after reopen is %d, want %d", third, second+1)
	}
}

func TestForeignFile(t *testing.T) {
	for _, name := range []string{"notes.txt", "0000000A.seg", "00000001.seg.tmp", "1.seg", "00000000.seg"} {
		fs := vfs.NewMem()
		if err := fs.MkdirAll("segs", 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := fs.Create(fs.PathJoin("segs", name), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if s, err := Open("segs", Options{FS: fs}); !errors.Is(err, ErrForeignFile) {
			if s != nil {
				s.Close()
			}
			t.Errorf("Open with %q: %v, want ErrForeignFile", name, err)
		}
	}
}

func TestClose(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("segs", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	locs := writeBlobs(t, s, makeBlobs(5, 1, 10))
	w, err := s.NewWriter()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Add([]byte("pending")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := w.Add([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close: %v, want ErrClosed", err)
	}
	if err := w.Finish(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Finish after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Read(locs[0], nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v, want ErrClosed", err)
	}
	if _, err := s.NewWriter(); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewWriter after Close: %v, want ErrClosed", err)
	}
	if err := s.Remove(locs[0].Seg); !errors.Is(err, ErrClosed) {
		t.Fatalf("Remove after Close: %v, want ErrClosed", err)
	}
}

func TestFileNames(t *testing.T) {
	for _, id := range []ID{1, 2, 0xff, 0x12345678, ^ID(0)} {
		name := fileName(id)
		if len(name) != 12 {
			t.Errorf("fileName(%d) = %q, want 12 characters", id, name)
		}
		if got, ok := parseFileName(name); !ok || got != id {
			t.Errorf("parseFileName(%q) = %d, %v", name, got, ok)
		}
	}
	if fileName(9) >= fileName(10) || fileName(0xff) >= fileName(0x100) {
		t.Error("file names do not sort as IDs")
	}
}

func TestLocEncoding(t *testing.T) {
	for _, l := range []Loc{{}, {Seg: 1, Block: 16, Off: 0, Len: 0}, {Seg: 7, Block: 64 << 20, Off: 65000, Len: 1024}, {Seg: ^ID(0), Block: ^uint32(0), Off: ^uint32(0), Len: ^uint32(0)}} {
		b := AppendLoc([]byte("prefix"), l)
		got, err := DecodeLoc(b[len("prefix"):])
		if err != nil || got != l {
			t.Errorf("DecodeLoc(AppendLoc(%+v)) = %+v, %v", l, got, err)
		}
		if len(b)-len("prefix") > MaxLocSize {
			t.Errorf("%+v encodes to %d bytes, above MaxLocSize", l, len(b)-len("prefix"))
		}
	}
	for _, b := range [][]byte{nil, {1, 2, 3}, {1, 2, 3, 4, 5}, {0x80, 0, 1, 1, 1}, {0xff, 0xff, 0xff, 0xff, 0x1f, 0, 0, 0}} {
		if _, err := DecodeLoc(b); !errors.Is(err, ErrBadLoc) {
			t.Errorf("DecodeLoc(%x): %v, want ErrBadLoc", b, err)
		}
	}
}

func TestBadLoc(t *testing.T) {
	fs := vfs.NewMem()
	s := openT(t, fs, "segs", smallOpts())
	blobs := [][]byte{[]byte("hello"), []byte("world!"), {}, []byte("tail")}
	locs := writeBlobs(t, s, blobs)
	for _, bad := range []Loc{
		{Seg: locs[1].Seg, Block: locs[1].Block, Off: locs[1].Off + 1, Len: locs[1].Len - 1}, // inside a blob
		{Seg: locs[1].Seg, Block: locs[1].Block, Off: locs[1].Off, Len: locs[1].Len + 1},     // wrong length
		{Seg: locs[1].Seg, Block: locs[1].Block, Off: 0, Len: 11},                            // two blobs
		{Seg: locs[1].Seg, Block: locs[1].Block, Off: 1000, Len: 1},                          // past the data
		{Seg: locs[1].Seg, Block: locs[1].Block + 3, Off: 0, Len: 5},                         // not a block
		{Seg: locs[1].Seg, Block: 2, Off: 0, Len: 5},                                         // the file header
		{Seg: locs[1].Seg, Block: 1 << 20, Off: 0, Len: 5},                                   // past the end
	} {
		_, err := s.Read(bad, nil)
		ce := asCorrupt(t, err)
		if ce.Offset != int64(bad.Block) {
			t.Errorf("Read(%+v): offset %d, want %d", bad, ce.Offset, bad.Block)
		}
	}
	if _, err := s.Read(Loc{Seg: 99, Block: 16, Len: 1}, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("Read of an unknown segment: %v, want ErrNotFound", err)
	}
	checkBlobs(t, s, locs, blobs)
}
