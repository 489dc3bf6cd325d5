package segment

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// benchBodies returns about 4 MiB of distinct JSON-like bodies of size, so
// that no block holds one body twice.
func benchBodies(size int) [][]byte {
	r := rand.New(rand.NewPCG(7, uint64(size)))
	bodies := make([][]byte, max(4<<20/size, 64))
	for i := range bodies {
		bodies[i] = jsonBody(r, size)
	}
	return bodies
}

var benchSizes = []int{1 << 10, 16 << 10}

// BenchmarkWrite adds JSON-like blobs with one Writer on the real
// filesystem and finishes it (the final fsync included), per codec and blob
// size.
func BenchmarkWrite(b *testing.B) {
	for _, codec := range []Codec{CodecS2, CodecZstd, CodecNone} {
		for _, size := range benchSizes {
			bodies := benchBodies(size)
			b.Run(fmt.Sprintf("%s/%dKiB", codec, size>>10), func(b *testing.B) {
				s, err := Open(b.TempDir(), Options{FS: vfs.Default, Codec: codec})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				b.ReportAllocs()
				b.SetBytes(int64(size))
				b.ResetTimer()
				w, err := s.NewWriter()
				if err != nil {
					b.Fatal(err)
				}
				for i := range b.N {
					if _, err := w.Add(bodies[i%len(bodies)]); err != nil {
						b.Fatal(err)
					}
				}
				if err := w.Finish(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
				var disk int64
				for _, si := range s.List() {
					disk += si.Size
				}
				b.ReportMetric(float64(b.N)*float64(size)/float64(disk), "ratio")
			})
		}
	}
}

// benchStore writes the bodies to a store on the real filesystem and
// returns it with their Locs in a random order.
func benchStore(b *testing.B, bodies [][]byte, cacheBytes int64) (*Store, []Loc) {
	s, err := Open(b.TempDir(), Options{FS: vfs.Default, CacheBytes: cacheBytes})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	locs := writeBlobs(b, s, bodies)
	rand.New(rand.NewPCG(1, 1)).Shuffle(len(locs), func(i, j int) { locs[i], locs[j] = locs[j], locs[i] })
	return s, locs
}

// BenchmarkRead reads single blobs in a random order: "cached" with a
// block cache holding every block (after a warm-up pass), "uncached"
// without a block cache, so every Read reads its block (from the OS page
// cache) and decompresses it.
func BenchmarkRead(b *testing.B) {
	for _, mode := range []string{"cached", "uncached"} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/%dKiB", mode, size>>10), func(b *testing.B) {
				cache := int64(64 << 20)
				if mode == "uncached" {
					cache = -1
				}
				s, locs := benchStore(b, benchBodies(size), cache)
				var buf []byte
				var err error
				for _, l := range locs {
					if buf, err = s.Read(l, buf[:0]); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.SetBytes(int64(size))
				b.ResetTimer()
				i := 0
				for b.Loop() {
					if buf, err = s.Read(locs[i%len(locs)], buf[:0]); err != nil {
						b.Fatal(err)
					}
					i++
				}
				b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkReadMany reads batches of 64 blobs in write order, as a queue
// refill does, without a block cache: each block is read and decompressed
// once per batch. By codec, since this is where decompression speed shows.
func BenchmarkReadMany(b *testing.B) {
	for _, codec := range []Codec{CodecS2, CodecZstd, CodecNone} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("uncached/%s/%dKiB", codec, size>>10), func(b *testing.B) {
				bodies := benchBodies(size)
				s, err := Open(b.TempDir(), Options{FS: vfs.Default, CacheBytes: -1, Codec: codec})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				locs := writeBlobs(b, s, bodies)
				const batch = 64
				b.ReportAllocs()
				b.SetBytes(int64(size) * batch)
				i := 0
				for b.Loop() {
					start := (i * batch) % (len(locs) - batch)
					if err := s.ReadMany(locs[start:start+batch], func(int, []byte) error { return nil }); err != nil {
						b.Fatal(err)
					}
					i++
				}
				b.ReportMetric(float64(i*batch)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}
