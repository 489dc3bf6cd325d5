package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// blockSeeds are real block encodings: each codec, JSON-like and random
// blobs, empty blobs, one blob and many.
func blockSeeds() [][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	sets := [][][]byte{
		{{}},
		{[]byte("a")},
		{[]byte("hello"), {}, []byte("world")},
		{jsonBody(r, 300), jsonBody(r, 1000), jsonBody(r, 20)},
		{randomBody(r, 200), randomBody(r, 50)},
	}
	var seeds [][]byte
	for _, blobs := range sets {
		for _, c := range []Codec{CodecNone, CodecS2, CodecZstd} {
			seeds = append(seeds, encodeBlock(nil, c, rawBlock(blobs), len(blobs)))
		}
	}
	return seeds
}

// FuzzBlockDecode feeds the block decoder arbitrary bytes. With fixCRC
// the CRC is recomputed first, so that mutations reach the checks behind
// it: codec, count, decompression and the blob table. It must not panic,
// must fail only with the package's block errors, and a block it accepts
// must re-encode to a block that decodes to the same payload (byte for
// byte the same block, for a stored-raw one).
func FuzzBlockDecode(f *testing.F) {
	for _, s := range blockSeeds() {
		f.Add(s, false)
		f.Add(s, true)
		f.Add(s[:len(s)/2], false)
	}
	f.Fuzz(func(t *testing.T, data []byte, fixCRC bool) {
		if fixCRC && len(data) >= blockHeaderSize {
			data = bytes.Clone(data)
			end := len(data)
			if stored := int64(binary.LittleEndian.Uint32(data[4:8])); blockHeaderSize+stored < int64(end) {
				end = blockHeaderSize + int(stored)
			}
			binary.LittleEndian.PutUint32(data[0:4], crc32.Checksum(data[4:end], crcTable))
		}
		blk, h, err := decodeBlock(data, nil, 1<<20)
		if err != nil {
			for _, kind := range blockErrors {
				if errors.Is(err, kind) {
					return
				}
			}
			t.Fatalf("untyped error %v", err)
		}
		if blk.n != int(h.count) || len(blk.raw) != int(h.raw) {
			t.Fatalf("block of %d blobs in %d bytes, header says %d in %d", blk.n, len(blk.raw), h.count, h.raw)
		}
		for i := range blk.n {
			start, end := blk.start(i), blk.end(i)
			b, ok := blk.blob(start, end-start)
			if !ok || !bytes.Equal(b, blk.raw[start:end]) {
				t.Fatalf("blob %d [%d, %d) not found by its own Loc", i, start, end)
			}
		}
		re := encodeBlock(nil, h.codec, blk.raw, blk.n)
		blk2, _, err := decodeBlock(re, nil, maxBlockLen)
		if err != nil {
			t.Fatalf("re-encoded block does not decode: %v", err)
		}
		if !bytes.Equal(blk2.raw, blk.raw) || blk2.n != blk.n {
			t.Fatal("re-encoded block decodes to another payload")
		}
		if h.codec == CodecNone && !bytes.Equal(re, data[:h.size()]) {
			t.Fatal("stored-raw block does not re-encode to itself")
		}
		if _, err := checkBlock(data); err != nil {
			t.Fatalf("checkBlock refuses a block decodeBlock accepts: %v", err)
		}
	})
}

// FuzzLocDecode feeds DecodeLoc arbitrary bytes: no panic, ErrBadLoc for
// what it refuses, and what it accepts re-encodes to the same bytes.
func FuzzLocDecode(f *testing.F) {
	for _, l := range []Loc{{}, {Seg: 1, Block: 16, Off: 0, Len: 1024}, {Seg: 300, Block: 64 << 20, Off: 65535, Len: 16 << 10}, {Seg: ^ID(0), Block: ^uint32(0), Off: ^uint32(0), Len: ^uint32(0)}} {
		f.Add(AppendLoc(nil, l))
	}
	f.Add([]byte{0x80, 0x00, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := DecodeLoc(data)
		if err != nil {
			if !errors.Is(err, ErrBadLoc) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if re := AppendLoc(nil, l); !bytes.Equal(re, data) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", data, l, re)
		}
	})
}

// FuzzFileHeader feeds the file header check arbitrary bytes: no panic,
// and it accepts only the header appendFileHeader makes.
func FuzzFileHeader(f *testing.F) {
	f.Add(appendFileHeader(nil, 1), uint32(1))
	f.Add(appendFileHeader(nil, 0xabcdef), uint32(0xabcdef))
	f.Add([]byte("bdsg"), uint32(1))
	f.Fuzz(func(t *testing.T, data []byte, id uint32) {
		off, reason := checkFileHeader(data, ID(id))
		if reason != "" {
			if off < 0 || off > fileHeaderSize {
				t.Fatalf("offset %d for %q", off, reason)
			}
			return
		}
		if !bytes.Equal(data[:fileHeaderSize], appendFileHeader(nil, ID(id))) {
			t.Fatalf("accepted %x as the header of %d", data[:fileHeaderSize], id)
		}
	})
}
