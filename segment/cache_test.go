package segment

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestCacheHits(t *testing.T) {
	fs := vfs.NewMem()
	s := openT(t, fs, "segs", Options{BlockSize: 4 << 10})
	blobs := makeBlobs(20, 1, 100) // all in a few blocks
	locs := writeBlobs(t, s, blobs)
	if st := s.CacheStats(); st != (CacheStats{}) {
		t.Fatalf("stats before any read: %+v", st)
	}
	if _, err := s.Read(locs[0], nil); err != nil {
		t.Fatal(err)
	}
	if st := s.CacheStats(); st.Misses != 1 || st.Hits != 0 || st.Bytes == 0 {
		t.Fatalf("after the first read: %+v, want one miss and the block cached", st)
	}
	if _, err := s.Read(locs[0], nil); err != nil {
		t.Fatal(err)
	}
	// locs[1] shares the block of locs[0].
	if locs[1].Block != locs[0].Block {
		t.Fatalf("test wants blobs 0 and 1 in one block: %+v %+v", locs[0], locs[1])
	}
	if _, err := s.Read(locs[1], nil); err != nil {
		t.Fatal(err)
	}
	if st := s.CacheStats(); st.Misses != 1 || st.Hits != 2 {
		t.Fatalf("after reads of a cached block: %+v, want 1 miss 2 hits", st)
	}

	// ReadMany loads each block once.
	blocks := map[blockKey]bool{}
	for _, l := range locs {
		blocks[blockKey{l.Seg, l.Block}] = true
	}
	before := s.CacheStats()
	if err := s.ReadMany(locs, func(int, []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	after := s.CacheStats()
	if got, want := after.Misses+after.Hits-before.Misses-before.Hits, int64(len(blocks)); got != want {
		t.Fatalf("ReadMany of %d blobs in %d blocks made %d cache lookups", len(locs), want, got)
	}
}

func TestCacheBounded(t *testing.T) {
	fs := vfs.NewMem()
	const blockSize = 4 << 10
	s := openT(t, fs, "segs", Options{BlockSize: blockSize, CacheBytes: 3 * blockSize})
	blobs := make([][]byte, 40)
	for i := range blobs {
		blobs[i] = testBlob(i, blockSize-blobEndSize) // one blob per block
	}
	locs := writeBlobs(t, s, blobs)
	for i := range 3 {
		checkBlobs(t, s, locs[i:i+1], blobs[i:i+1])
	}
	if st := s.CacheStats(); st.Bytes != 3*blockSize {
		t.Fatalf("three blocks cached take %d bytes, want %d", st.Bytes, 3*blockSize)
	}
	checkBlobs(t, s, locs, blobs)
	if st := s.CacheStats(); st.Bytes > 3*blockSize {
		t.Fatalf("cache holds %d bytes, budget %d", st.Bytes, 3*blockSize)
	}
	// The first block was evicted; the last one was not.
	before := s.CacheStats()
	checkBlobs(t, s, locs[len(locs)-1:], blobs[len(blobs)-1:])
	checkBlobs(t, s, locs[:1], blobs[:1])
	after := s.CacheStats()
	if after.Hits != before.Hits+1 || after.Misses != before.Misses+1 {
		t.Fatalf("re-reading the newest and the oldest block: %+v -> %+v, want one hit and one miss", before, after)
	}

	// A block above the whole budget is served but not cached.
	big := writeBlobs(t, s, [][]byte{testBlob(99, 10*blockSize)})
	checkBlobs(t, s, big, [][]byte{testBlob(99, 10*blockSize)})
	if st := s.CacheStats(); st.Bytes > 3*blockSize {
		t.Fatalf("cache holds %d bytes after a huge block, budget %d", st.Bytes, 3*blockSize)
	}
}

func TestNoCache(t *testing.T) {
	fs := vfs.NewMem()
	s := openT(t, fs, "segs", Options{BlockSize: 4 << 10, CacheBytes: -1})
	blobs := makeBlobs(200, 3, 20000)
	locs := writeBlobs(t, s, blobs)
	checkBlobs(t, s, locs, blobs)
	checkBlobs(t, s, locs, blobs)
	n := 0
	err := s.ReadMany(locs, func(i int, b []byte) error {
		n++
		if !bytes.Equal(b, blobs[i]) {
			t.Errorf("ReadMany %d: wrong blob", i)
		}
		return nil
	})
	if err != nil || n != len(locs) {
		t.Fatalf("ReadMany: %v after %d blobs", err, n)
	}
	if st := s.CacheStats(); st != (CacheStats{}) {
		t.Fatalf("stats without a cache: %+v", st)
	}
}

// TestConcurrentReads reads from several goroutines while a Writer writes
// new segments and old ones are removed, with a cache small enough to
// evict all the time. Run it with -race.
func TestConcurrentReads(t *testing.T) {
	for _, cacheBytes := range []int64{16 << 10, -1} {
		fs := vfs.NewMem()
		s := openT(t, fs, "segs", Options{BlockSize: 2 << 10, TargetSize: 8 << 10, CacheBytes: cacheBytes})
		blobs := makeBlobs(400, 11, 5000)
		locs := writeBlobs(t, s, blobs)
		doomed := writeBlobs(t, s, makeBlobs(100, 12, 10))

		var wg sync.WaitGroup
		var reads atomic.Int64
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(g), 99))
				var buf []byte
				for range 500 {
					i := r.IntN(len(locs))
					var err error
					buf, err = s.Read(locs[i], buf[:0])
					if err != nil {
						t.Errorf("Read %d: %v", i, err)
						return
					}
					if !bytes.Equal(buf, blobs[i]) {
						t.Errorf("Read %d: wrong blob", i)
						return
					}
					reads.Add(1)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := s.NewWriter()
			if err != nil {
				t.Error(err)
				return
			}
			for i := range 300 {
				if _, err := w.Add(testBlob(i, 700)); err != nil {
					t.Error(err)
				}
			}
			if err := w.Finish(); err != nil {
				t.Error(err)
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen := map[ID]bool{}
			for _, l := range doomed {
				if !seen[l.Seg] {
					seen[l.Seg] = true
					if err := s.Remove(l.Seg); err != nil {
						t.Error(err)
					}
				}
			}
		}()
		wg.Wait()
		if reads.Load() != 2000 {
			t.Fatalf("%d reads done", reads.Load())
		}
	}
}

// TestCacheSingleLoad checks that concurrent misses on one block load it
// once: the second caller waits for the first one's load.
func TestCacheSingleLoad(t *testing.T) {
	c := newBlockCache(1 << 20)
	key := blockKey{1, 16}
	started := make(chan struct{})
	release := make(chan struct{})
	var loads atomic.Int32
	load := func() (block, error) {
		loads.Add(1)
		close(started)
		<-release
		return block{raw: rawBlock([][]byte{[]byte("x")}), n: 1}, nil
	}
	var wg sync.WaitGroup
	results := make([]block, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		results[0], _ = c.get(key, load)
	}()
	<-started
	wg.Add(1)
	go func() {
		defer wg.Done()
		results[1], _ = c.get(key, func() (block, error) { loads.Add(1); return block{}, nil })
	}()
	// The second get counts a hit before it waits for the load.
	for c.stats().Hits == 0 {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if loads.Load() != 1 {
		t.Fatalf("%d loads, want 1", loads.Load())
	}
	if results[1].n != 1 || !bytes.Equal(results[0].raw, results[1].raw) {
		t.Fatalf("waiter got %+v", results[1])
	}
	// Dropping the segment forgets the block.
	c.drop(1)
	if st := c.stats(); st.Bytes != 0 {
		t.Fatalf("after drop: %+v", st)
	}
}
