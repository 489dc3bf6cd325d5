package segment

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// BenchmarkCodec measures the codecs on blocks of DefaultBlockSize built
// from 1 KiB and 16 KiB bodies, JSON-like and random: compress and
// decompress throughput in uncompressed MB/s, and the ratio (uncompressed
// / compressed). The package doc reports its figures and the choice they
// led to. Each op codes one block; the blocks cycle through 1 MiB of
// distinct data so no block stays hot in the CPU cache.
func BenchmarkCodec(b *testing.B) {
	type codec struct {
		name   string
		encode func(dst, src []byte) []byte
		decode func(dst, src []byte) ([]byte, error)
	}
	zfast, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false), zstd.WithLowerEncoderMem(true))
	if err != nil {
		b.Fatal(err)
	}
	zdef, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false), zstd.WithLowerEncoderMem(true))
	if err != nil {
		b.Fatal(err)
	}
	zdec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		b.Fatal(err)
	}
	defer zdec.Close()
	zdecode := func(dst, src []byte) ([]byte, error) { return zdec.DecodeAll(src, dst[:0]) }
	codecs := []codec{
		{"s2", s2.Encode, s2.Decode},
		{"s2-better", s2.EncodeBetter, s2.Decode},
		{"zstd-fastest", func(dst, src []byte) []byte { return zfast.EncodeAll(src, dst[:0]) }, zdecode},
		{"zstd-default", func(dst, src []byte) []byte { return zdef.EncodeAll(src, dst[:0]) }, zdecode},
	}
	payloads := []struct {
		name string
		gen  func(*rand.Rand, int) []byte
	}{{"json", jsonBody}, {"random", randomBody}}
	for _, c := range codecs {
		for _, p := range payloads {
			for _, size := range []int{1 << 10, 16 << 10} {
				blocks := codecBlocks(p.gen, size)
				var rawTotal, encTotal int
				enc := make([][]byte, len(blocks))
				for i, raw := range blocks {
					enc[i] = c.encode(nil, raw)
					rawTotal += len(raw)
					encTotal += len(enc[i])
				}
				ratio := float64(rawTotal) / float64(encTotal)
				name := fmt.Sprintf("%s/%s/%dKiB", c.name, p.name, size>>10)
				b.Run(name+"/compress", func(b *testing.B) {
					b.ReportAllocs()
					b.SetBytes(int64(rawTotal / len(blocks)))
					dst := make([]byte, s2.MaxEncodedLen(DefaultBlockSize+1<<12))
					i := 0
					for b.Loop() {
						dst = c.encode(dst[:cap(dst)], blocks[i%len(blocks)])
						i++
					}
					b.ReportMetric(ratio, "ratio")
				})
				b.Run(name+"/decompress", func(b *testing.B) {
					b.ReportAllocs()
					b.SetBytes(int64(rawTotal / len(blocks)))
					dst := make([]byte, 2*DefaultBlockSize)
					i := 0
					for b.Loop() {
						out, err := c.decode(dst, enc[i%len(enc)])
						if err != nil {
							b.Fatal(err)
						}
						dst = out[:cap(out)]
						i++
					}
					b.ReportMetric(ratio, "ratio")
				})
			}
		}
	}
}

// codecBlocks returns 1 MiB of block payloads as the Writer builds them
// (bodies plus blob table, cut at DefaultBlockSize) from bodies of size.
func codecBlocks(gen func(*rand.Rand, int) []byte, size int) [][]byte {
	r := rand.New(rand.NewPCG(1, uint64(size)))
	var blocks [][]byte
	for total := 0; total < 1<<20; {
		var bodies [][]byte
		n := 0
		for n+size+blobEndSize <= DefaultBlockSize || len(bodies) == 0 {
			bodies = append(bodies, gen(r, size))
			n += size + blobEndSize
		}
		raw := rawBlock(bodies)
		blocks = append(blocks, raw)
		total += len(raw)
	}
	return blocks
}
