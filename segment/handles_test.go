package segment

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// openCountFS counts the files opened for reading and not yet closed.
type openCountFS struct {
	vfs.FS
	open, opens atomic.Int64
}

type countedFile struct {
	vfs.File
	fs *openCountFS
}

func (f *countedFile) Close() error {
	f.fs.open.Add(-1)
	return f.File.Close()
}

func (fs *openCountFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if err != nil {
		return nil, err
	}
	fs.open.Add(1)
	fs.opens.Add(1)
	return &countedFile{File: f, fs: fs}, nil
}

// Read handles are kept open for the next read, but never more than
// Options.MaxOpenFiles of them: the least recently used idle one is closed
// before another is opened, so a store of many segments does not take the
// process's descriptors from the index and the clients' sockets. Every
// blob stays readable.
func TestMaxOpenFiles(t *testing.T) {
	fs := &openCountFS{FS: vfs.NewMem()}
	opts := smallOpts()
	opts.CacheBytes = -1 // every read goes to its file
	opts.MaxOpenFiles = 3
	s := openT(t, fs, "segs", opts)
	r := rand.New(rand.NewPCG(1, 2))
	blobs := make([][]byte, 400)
	for i := range blobs {
		blobs[i] = randomBody(r, 1000) // incompressible: many files
	}
	locs := writeBlobs(t, s, blobs)
	if n := len(s.List()); n < 8 {
		t.Fatalf("%d segments, want at least 8 for the test to mean something", n)
	}
	for range 2 {
		for i := range locs {
			checkBlobs(t, s, locs[i:i+1], blobs[i:i+1])
			if open := fs.open.Load(); open > 3 {
				t.Fatalf("%d read handles open, MaxOpenFiles is 3", open)
			}
		}
	}
	// The handle last used is reused, not opened again.
	before := fs.opens.Load()
	checkBlobs(t, s, locs[len(locs)-1:], blobs[len(blobs)-1:])
	if fs.opens.Load() != before {
		t.Error("a read of the segment read last opened it again")
	}
}
