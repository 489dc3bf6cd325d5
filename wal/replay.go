package wal

import (
	"fmt"
	"io"
	"slices"
)

// Replay calls fn for every Durable record with an LSN of at least from, in
// LSN order; Volatile records are skipped. rec is valid only during fn. An
// error from fn stops the replay and is returned; damage is a *CorruptError.
//
// Replay is recovery: call it after Open and before the first Append (it
// returns ErrReplayAfterAppend after one), and not concurrently with Append
// or RemoveBefore. It may be called more than once. A from below the first
// LSN still on disk is an error wrapping ErrRemoved; from 0 means 1.
func (w *WAL) Replay(from LSN, fn func(lsn LSN, rec []byte) error) error {
	return w.ReplayClasses(from, func(lsn LSN, c Class, rec []byte) error {
		if c != Durable {
			return nil
		}
		return fn(lsn, rec)
	})
}

// ReplayClasses is Replay for a caller that also reads the Volatile
// records still on disk, each with its class: one written before a crash
// may be missing (it was never synced), so a caller takes from it only
// what it can do without, such as the highest id it used.
func (w *WAL) ReplayClasses(from LSN, fn func(lsn LSN, c Class, rec []byte) error) error {
	w.mu.Lock()
	err := w.usableLocked()
	if err == nil && w.appended {
		err = ErrReplayAfterAppend
	}
	w.mu.Unlock()
	if err != nil {
		return err
	}
	from = max(from, 1)
	w.filesMu.Lock()
	files := slices.Clone(w.files)
	w.filesMu.Unlock()
	if from < files[0].first {
		return fmt.Errorf("replay from LSN %d: the oldest file, %s, starts at LSN %d: %w",
			from, files[0].path, files[0].first, ErrRemoved)
	}
	start := 0
	for start+1 < len(files) && files[start+1].first <= from {
		start++
	}
	for _, fm := range files[start:] {
		if err := replayFile(w, fm, from, fn); err != nil {
			return err
		}
	}
	return nil
}

func replayFile(w *WAL, fm fileMeta, from LSN, fn func(LSN, Class, []byte) error) error {
	open := openSegment
	if fm.badHeader {
		open = openRecords // covered damage Open let be
	}
	r, err := open(w.fs, fm.path, fm.first)
	if err != nil {
		return err
	}
	defer r.close()
	r.holes = fm.holes
	// Open read the file to its clean end and checked what follows it
	// (zeros, or a reused file's earlier life: cleanEnd); nothing has
	// been appended since. Reading stops there rather than scanning that
	// tail again, up to a whole file of it per file.
	r.size = min(r.size, fm.size)
	for {
		h, payload, err := r.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if h.lsn < from || h.class == classSkip {
			continue
		}
		if err := fn(h.lsn, h.class, payload); err != nil {
			return err
		}
	}
}
