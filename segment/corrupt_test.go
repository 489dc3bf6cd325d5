package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// harness is a store written and closed, ready to be broken: its blobs,
// their Locs, and the blocks of every file as written.
type harness struct {
	fs     vfs.FS
	dir    string
	opts   Options
	blobs  [][]byte
	locs   []Loc
	blocks map[ID][]blockPos // per segment, in file order
	ids    []ID
}

type blockPos struct {
	off, size int64
}

func (h *harness) path(id ID) string { return h.fs.PathJoin(h.dir, fileName(id)) }

// newHarness writes 300 JSON-ish blobs with codec over several files.
func newHarness(t *testing.T, codec Codec) *harness {
	t.Helper()
	h := &harness{fs: vfs.NewMem(), dir: "segs", opts: Options{Codec: codec, BlockSize: 4 << 10, TargetSize: 24 << 10}}
	s := openT(t, h.fs, h.dir, h.opts)
	r := rand.New(rand.NewPCG(42, 42))
	for range 300 {
		h.blobs = append(h.blobs, jsonBody(r, 50+r.IntN(900)))
	}
	h.locs = writeBlobs(t, s, h.blobs)
	h.blocks = map[ID][]blockPos{}
	for _, si := range s.List() {
		h.ids = append(h.ids, si.ID)
		data := h.read(t, si.ID)
		for off := int64(fileHeaderSize); off < int64(len(data)); {
			bh, err := parseBlockHeader(data[off:])
			if err != nil {
				t.Fatal(err)
			}
			h.blocks[si.ID] = append(h.blocks[si.ID], blockPos{off, bh.size()})
			off += bh.size()
		}
	}
	if len(h.ids) < 3 || len(h.blocks[h.ids[0]]) < 4 {
		t.Fatalf("harness wants 3+ files of 4+ blocks: %v", h.blocks)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) read(t *testing.T, id ID) []byte {
	t.Helper()
	f, err := h.fs.Open(h.path(id))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// rewrite replaces segment id's file with edit(its bytes).
func (h *harness) rewrite(t *testing.T, id ID, edit func([]byte) []byte) {
	t.Helper()
	data := edit(h.read(t, id))
	f, err := h.fs.Create(h.path(id), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// middle returns the segment and block the cases break: the third block
// of the first file, which is not the last file.
func (h *harness) middle() (ID, blockPos) {
	return h.ids[0], h.blocks[h.ids[0]][2]
}

// damage says where a broken store must report damage: for each segment,
// the offsets of the blocks that are unreadable.
type damage map[ID]map[int64]bool

func blocksFrom(h *harness, id ID, from int) damage {
	d := damage{id: {}}
	for _, b := range h.blocks[id][from:] {
		d[id][b.off] = true
	}
	return d
}

func TestCorruption(t *testing.T) {
	type wantOpen struct {
		off    int64
		reason string // in the error's Reason
	}
	cases := []struct {
		name    string
		breakIt func(t *testing.T, h *harness) damage
		open    *wantOpen              // Open must fail so
		torn    func(h *harness) int64 // the last file's Valid, when Open finds it torn
		kind    error                  // kind of the read errors
		// header: Verify reports a damaged file header at this offset
		// (nil: none).
		header *int64
	}{
		{
			name: "flipped payload bit",
			breakIt: func(t *testing.T, h *harness) damage {
				id, b := h.middle()
				h.rewrite(t, id, func(d []byte) []byte { d[b.off+blockHeaderSize+b.size/3] ^= 0x10; return d })
				return damage{id: {b.off: true}}
			},
			kind: errBadCRC,
		},
		{
			name: "flipped CRC bit",
			breakIt: func(t *testing.T, h *harness) damage {
				id, b := h.middle()
				h.rewrite(t, id, func(d []byte) []byte { d[b.off+1] ^= 0x01; return d })
				return damage{id: {b.off: true}}
			},
			kind: errBadCRC,
		},
		{
			name: "flipped codec bit",
			breakIt: func(t *testing.T, h *harness) damage {
				id, b := h.middle()
				h.rewrite(t, id, func(d []byte) []byte { d[b.off+16] ^= 0x04; return d })
				return damage{id: {b.off: true}}
			},
			kind: errBadCRC,
		},
		{
			name: "block length past the end",
			breakIt: func(t *testing.T, h *harness) damage {
				id, b := h.middle()
				h.rewrite(t, id, func(d []byte) []byte {
					binary.LittleEndian.PutUint32(d[b.off+4:], 1<<29)
					return d
				})
				return damage{id: {b.off: true}}
			},
			kind: errShortBlock, // indistinguishable from a file cut short
		},
		{
			name: "block length above the limit",
			breakIt: func(t *testing.T, h *harness) damage {
				id, b := h.middle()
				h.rewrite(t, id, func(d []byte) []byte {
					binary.LittleEndian.PutUint32(d[b.off+8:], 0xffffff00)
					return d
				})
				return damage{id: {b.off: true}}
			},
			kind: errBadLength,
		},
		{
			name: "block length one short",
			breakIt: func(t *testing.T, h *harness) damage {
				id, b := h.middle()
				h.rewrite(t, id, func(d []byte) []byte {
					binary.LittleEndian.PutUint32(d[b.off+4:], uint32(b.size-blockHeaderSize-1))
					return d
				})
				return damage{id: {b.off: true}}
			},
			kind: errBadCRC,
		},
		{
			name: "zeroed sector",
			breakIt: func(t *testing.T, h *harness) damage {
				id, b := h.middle()
				sector := (b.off + b.size/2) &^ 511
				h.rewrite(t, id, func(d []byte) []byte { clear(d[sector : sector+512]); return d })
				d := damage{id: {}}
				for _, x := range h.blocks[id] {
					if x.off < sector+512 && x.off+x.size > sector {
						d[id][x.off] = true
					}
				}
				return d
			},
			kind: errBadCRC,
		},
		{
			name: "truncated file inside a block",
			breakIt: func(t *testing.T, h *harness) damage {
				id, b := h.middle()
				h.rewrite(t, id, func(d []byte) []byte { return d[:b.off+b.size/2] })
				return blocksFrom(h, id, 2)
			},
			kind: errShortBlock,
		},
		{
			name: "truncated file inside a block header",
			breakIt: func(t *testing.T, h *harness) damage {
				id, b := h.middle()
				h.rewrite(t, id, func(d []byte) []byte { return d[:b.off+5] })
				return blocksFrom(h, id, 2)
			},
			kind: errShortBlock,
		},
		{
			name: "torn last file",
			breakIt: func(t *testing.T, h *harness) damage {
				id := h.ids[len(h.ids)-1]
				b := h.blocks[id][1]
				h.rewrite(t, id, func(d []byte) []byte { clear(d[b.off+b.size-3:]); return d })
				return blocksFrom(h, id, 1)
			},
			torn: func(h *harness) int64 { return h.blocks[h.ids[len(h.ids)-1]][1].off },
			kind: errBadCRC,
		},
		{
			name: "last file header never written",
			breakIt: func(t *testing.T, h *harness) damage {
				h.rewrite(t, h.ids[len(h.ids)-1], func(d []byte) []byte { clear(d[:fileHeaderSize]); return d })
				return nil // its blocks are intact and stay readable
			},
			torn:   func(*harness) int64 { return 0 },
			header: at(0), // what Verify reports; the store removes such a file
		},
		// A damaged file header (its CRC fails) costs nothing: the
		// blocks are read on their own checksums.
		{
			name: "bad magic",
			breakIt: func(t *testing.T, h *harness) damage {
				h.rewrite(t, h.ids[1], func(d []byte) []byte { d[0] = 'x'; return d })
				return nil
			},
			header: at(0),
		},
		{
			name: "flipped version bit",
			breakIt: func(t *testing.T, h *harness) damage {
				h.rewrite(t, h.ids[1], func(d []byte) []byte { d[4] ^= 0x02; return d })
				return nil
			},
			header: at(4),
		},
		{
			name: "newer format version",
			breakIt: func(t *testing.T, h *harness) damage {
				h.rewrite(t, h.ids[1], func(d []byte) []byte {
					binary.LittleEndian.PutUint32(d[4:], formatVersion+1)
					binary.LittleEndian.PutUint32(d[12:], crc32.Checksum(d[:12], crcTable))
					return d
				})
				return nil
			},
			open: &wantOpen{4, "unsupported format version"},
		},
		{
			name: "file renamed",
			breakIt: func(t *testing.T, h *harness) damage {
				data := h.read(t, h.ids[0])
				if err := h.fs.Remove(h.path(h.ids[0])); err != nil {
					t.Fatal(err)
				}
				f, err := h.fs.Create(h.path(h.ids[0]+100), vfs.WriteCategoryUnspecified)
				if err != nil {
					t.Fatal(err)
				}
				f.Write(data)
				f.Close()
				return nil
			},
			open: &wantOpen{8, "names segment"},
		},
		{
			name: "truncated file header",
			breakIt: func(t *testing.T, h *harness) damage {
				h.rewrite(t, h.ids[0], func(d []byte) []byte { return d[:7] })
				return blocksFrom(h, h.ids[0], 0)
			},
			header: at(7),
			kind:   errShortBlock,
		},
	}
	for _, codec := range []Codec{CodecS2, CodecNone, CodecZstd} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/%s", codec, tc.name), func(t *testing.T) {
				h := newHarness(t, codec)
				dmg := tc.breakIt(t, h)
				s, err := Open(h.dir, Options{FS: h.fs, Codec: codec, BlockSize: h.opts.BlockSize, TargetSize: h.opts.TargetSize})
				if tc.open != nil {
					if err == nil {
						s.Close()
						t.Fatal("Open succeeded, want a *CorruptError")
					}
					ce := asCorrupt(t, err)
					if ce.Offset != tc.open.off || !bytes.Contains([]byte(ce.Reason), []byte(tc.open.reason)) || ce.File == "" {
						t.Fatalf("Open: %v, want offset %d and %q", err, tc.open.off, tc.open.reason)
					}
					reps, err := Verify(h.fs, h.dir)
					if err != nil {
						t.Fatalf("Verify: %v", err)
					}
					i := slices.IndexFunc(reps, func(r FileReport) bool { return r.File == ce.File })
					if i < 0 || len(reps[i].Damage) == 0 || !reps[i].Damage[0].Header || reps[i].Damage[0].Offset != tc.open.off {
						t.Fatalf("Verify reports %+v, want %s's header damaged at %d", reps, ce.File, tc.open.off)
					}
					return
				}
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				defer s.Close()
				checkDamage(t, h, s, dmg, tc.kind)
				checkVerify(t, h, dmg, tc.header)
				if tc.torn != nil {
					last := h.ids[len(h.ids)-1]
					want := tc.torn(h)
					l := s.List()
					if got := l[len(l)-1]; got.ID != last || got.Valid != want {
						t.Fatalf("last file %+v, want valid length %d", got, want)
					}
				}
			})
		}
	}
}

func at(off int64) *int64 { return &off }

// checkVerify checks that Verify reports exactly the damaged blocks of
// dmg: each lies in a reported span, and no intact block does; and a
// damaged file header at header (if not nil), in the file whose header it
// is: the second, or the first when the first is cut short.
func checkVerify(t *testing.T, h *harness, dmg damage, header *int64) {
	t.Helper()
	reps, err := Verify(h.fs, h.dir)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	headers := 0
	for _, r := range reps {
		for _, d := range r.Damage {
			if d.Header {
				headers++
				if header == nil || d.Offset != *header {
					t.Fatalf("Verify reports a damaged header of segment %d at %d, want %v", r.ID, d.Offset, header)
				}
			}
		}
		in := func(off int64) bool {
			for _, d := range r.Damage {
				if off >= d.Offset && off < d.End {
					return true
				}
			}
			// Blocks of a file cut short: gone with its damaged end.
			n := len(r.Damage)
			return off >= r.Size && n > 0 && r.Damage[n-1].End == r.Size
		}
		for _, b := range h.blocks[r.ID] {
			if in(b.off) != dmg[r.ID][b.off] {
				t.Fatalf("Verify of segment %d: block at %d reported damaged %v, want %v: %+v", r.ID, b.off, in(b.off), dmg[r.ID][b.off], r.Damage)
			}
		}
		intact := len(h.blocks[r.ID]) - len(dmg[r.ID])
		if r.Blocks != intact {
			t.Fatalf("Verify of segment %d counts %d intact blocks, want %d", r.ID, r.Blocks, intact)
		}
	}
	if header != nil && headers != 1 {
		t.Fatalf("Verify reports %d damaged headers, want one at %d", headers, *header)
	}
}

// checkDamage reads every blob and scans every segment of a broken store:
// a blob in a damaged block must give a *CorruptError naming its file and
// block (of kind for the first damaged block of a file), every other blob
// its bytes; ReadManyDamaged of them all must read every other blob and
// report exactly the damaged ones; Scan must stop at the first damaged
// block with the blobs before it intact.
func checkDamage(t *testing.T, h *harness, s *Store, dmg damage, kind error) {
	t.Helper()
	firstDamaged := map[ID]int64{}
	for id, offs := range dmg {
		firstDamaged[id] = 1 << 62
		for off := range offs {
			firstDamaged[id] = min(firstDamaged[id], off)
		}
	}
	for i, loc := range h.locs {
		got, err := s.Read(loc, nil)
		if dmg[loc.Seg][int64(loc.Block)] {
			ce := asCorrupt(t, err)
			if ce.File != h.path(loc.Seg) || ce.Offset != int64(loc.Block) {
				t.Fatalf("blob %d at %+v: %v, want file %s offset %d", i, loc, err, h.path(loc.Seg), loc.Block)
			}
			if int64(loc.Block) == firstDamaged[loc.Seg] && !errors.Is(err, kind) {
				t.Fatalf("blob %d at %+v: %v, want %v", i, loc, err, kind)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, h.blobs[i]) {
			t.Fatalf("undamaged blob %d at %+v: %v (%d bytes, want %d)", i, loc, err, len(got), len(h.blobs[i]))
		}
	}
	read := make([]bool, len(h.locs))
	err := s.ReadManyDamaged(h.locs, func(i int, blob []byte) error {
		if dmg[h.locs[i].Seg][int64(h.locs[i].Block)] || !bytes.Equal(blob, h.blobs[i]) || read[i] {
			t.Fatalf("ReadManyDamaged read blob %d at %+v wrongly", i, h.locs[i])
		}
		read[i] = true
		return nil
	}, func(i int, ce *CorruptError) error {
		if !dmg[h.locs[i].Seg][int64(h.locs[i].Block)] || ce.File != h.path(h.locs[i].Seg) || ce.Offset != int64(h.locs[i].Block) || read[i] {
			t.Fatalf("ReadManyDamaged reports blob %d at %+v damaged: %v", i, h.locs[i], ce)
		}
		read[i] = true
		return nil
	})
	if err != nil {
		t.Fatalf("ReadManyDamaged: %v", err)
	}
	for i := range read {
		if !read[i] {
			t.Fatalf("ReadManyDamaged left blob %d out", i)
		}
	}
	byLoc := map[Loc][]byte{}
	for i, l := range h.locs {
		byLoc[l] = h.blobs[i]
	}
	for _, id := range h.ids {
		var last int64 = -1
		err := s.Scan(id, func(loc Loc, blob []byte) error {
			if !bytes.Equal(byLoc[loc], blob) {
				t.Fatalf("Scan %d gave %+v with wrong bytes", id, loc)
			}
			last = int64(loc.Block)
			return nil
		})
		first, damaged := firstDamaged[id]
		if !damaged {
			if err != nil {
				t.Fatalf("Scan of undamaged segment %d: %v", id, err)
			}
			continue
		}
		ce := asCorrupt(t, err)
		if ce.Offset != first || ce.File != h.path(id) {
			t.Fatalf("Scan %d: %v, want damage at %d", id, err, first)
		}
		if last >= first {
			t.Fatalf("Scan %d gave a blob of block %d, at or after the damage at %d", id, last, first)
		}
	}
}
