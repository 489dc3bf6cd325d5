package segment

import (
	"fmt"
	"io"
	"slices"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FileReport is what Verify found in one segment file.
type FileReport struct {
	ID     ID
	File   string
	Size   int64
	Blocks int // intact blocks
	Blobs  int // blobs in them
	// Damage is every damaged span, in file order: a bad file header
	// (Offset 0), or a block that fails its checks, with where the next
	// intact block starts (End; the file's size when none follows).
	Damage []BlockDamage
}

// BlockDamage is one damaged span of a segment file. Blobs whose Loc names
// a block at Offset are lost; those of blocks after End are not.
type BlockDamage struct {
	Offset, End int64
	Reason      string
	Header      bool // the file header, not a block
}

// Verify reads every block of every segment file in dir, checking lengths,
// CRCs and blob tables, and reports what is damaged. It goes on past a
// damaged block (by its length when its header is intact, else to the
// next offset where an intact block starts), so one damaged block hides
// no other. It writes nothing and takes no lock.
func Verify(fs vfs.FS, dir string) ([]FileReport, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("list segment directory %s: %w", dir, err)
	}
	var ids []ID
	for _, name := range names {
		id, ok := parseFileName(name)
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrForeignFile, fs.PathJoin(dir, name))
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []FileReport
	for _, id := range ids {
		r, err := verifyFile(fs, fs.PathJoin(dir, fileName(id)), id)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func verifyFile(fs vfs.FS, path string, id ID) (FileReport, error) {
	rep := FileReport{ID: id, File: path}
	f, err := fs.Open(path)
	if err != nil {
		return rep, fmt.Errorf("open segment %d: %w", id, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return rep, fmt.Errorf("read segment %d: %w", id, err)
	}
	rep.Size = int64(len(data))
	if off, reason := checkFileHeader(data[:min(len(data), fileHeaderSize)], id); reason != "" {
		rep.Damage = append(rep.Damage, BlockDamage{Offset: off, End: min(fileHeaderSize, rep.Size), Reason: reason, Header: true})
	}
	for off := int64(fileHeaderSize); off < int64(len(data)); {
		blk, h, err := decodeBlock(data[off:], nil, maxBlockLen)
		if err == nil {
			rep.Blocks++
			rep.Blobs += blk.n
			off += h.size()
			continue
		}
		d := BlockDamage{Offset: off, Reason: err.Error(), End: int64(len(data))}
		if next := off + h.size(); h.size() > blockHeaderSize && next < int64(len(data)) && intactBlockAt(data, next) {
			d.End = next // the length was right: only this block
		} else if next, ok := nextIntactBlock(data, off+1); ok {
			d.End = next
		}
		rep.Damage = append(rep.Damage, d)
		off = d.End
	}
	return rep, nil
}

// intactBlockAt reports whether an intact block starts at off of data.
func intactBlockAt(data []byte, off int64) bool {
	_, err := checkBlock(data[off:])
	return err == nil
}

// nextIntactBlock returns the first offset from off on where an intact
// block starts.
func nextIntactBlock(data []byte, off int64) (int64, bool) {
	for ; off+blockHeaderSize <= int64(len(data)); off++ {
		h, err := parseBlockHeader(data[off:])
		if err != nil || !h.codec.valid() || h.count == 0 || off+h.size() > int64(len(data)) {
			continue
		}
		if intactBlockAt(data, off) {
			return off, true
		}
	}
	return 0, false
}
