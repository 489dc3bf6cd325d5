package wal

// The index ReadAt locates records with: per file, where some of its
// records start (the package doc's "Reading by LSN" says what it costs).
//
// A file's entries are its first record, the first record after each
// damaged span Open stepped over, and every record that starts at least
// indexStride bytes after the entry before it. So a record that has no
// entry starts less than indexStride bytes after the last entry at or
// below its LSN, and no record between that entry and it has an entry of
// its own: ReadAt reads one window from the entry on and walks the record
// headers in it, never a whole file.
//
// Recovery builds the entries of every file as it reads them (scanFile);
// the writer adds those of each write once the write returned (noteWritten).
// They live in the file's fileMeta, so RemoveBefore forgets them with the
// file, and a file started from the spare starts with none: nothing ever
// points into a recycled file's earlier life.

// indexStride is the most bytes of a file between two index entries, but
// for the record that straddles the mark: 16 bytes of index per 16 KiB of
// file (1 KiB per MiB, 64 KiB for a 64 MiB file). A read walks at most
// this many bytes of headers: small records took 0.8, 1.3 and 4 µs with
// 4, 16 and 64 KiB (BenchmarkReadAt/hot).
const indexStride = 16 << 10

// indexEntry says that the record with LSN lsn starts at offset off of its
// file.
type indexEntry struct {
	lsn LSN
	off int64
}

// newIndex returns the index of a file of capacity bytes, allocated for
// as many entries as the file can need: growing it by append would copy
// it and, over a file, allocate about five times as much.
func newIndex(capacity int64) []indexEntry {
	return make([]indexEntry, 0, (capacity-fileHeaderSize)/indexStride+1)
}

// addIndex adds the record with LSN lsn at offset off, the next record of
// the file whose entries are ix, if it is due an entry or force is set
// (the first record after damage stepped over). It returns ix.
func addIndex(ix []indexEntry, lsn LSN, off int64, force bool) []indexEntry {
	if n := len(ix); n > 0 && !force && off-ix[n-1].off < indexStride {
		return ix
	}
	return append(ix, indexEntry{lsn: lsn, off: off})
}

// noteWritten makes recs readable: they were just written back to back
// from offset off of the file being written, the last of w.files, and the
// write returned. Writer goroutine only; one lock per write, not per
// record.
func (w *WAL) noteWritten(recs []pendingRec, off int64) {
	if len(recs) == 0 {
		return
	}
	w.filesMu.Lock()
	fm := &w.files[len(w.files)-1]
	for _, r := range recs {
		fm.index = addIndex(fm.index, r.lsn, off, false)
		off += int64(r.size)
	}
	fm.size = off
	w.rd.written = recs[len(recs)-1].lsn
	w.filesMu.Unlock()
}
