package wal

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/internal/fsutil"
)

// createFile creates the file whose first record will be first, with its
// header written and fsync'd, preallocated to capacity, and its directory
// entry fsync'd. A crash anywhere in here leaves either no file or one whose
// header is missing, which Open recreates. On failure what was created is
// removed (best effort: a file left holds no record, and Open or the next
// attempt recreates it).
func (w *WAL) createFile(first LSN, capacity int64) (f vfs.File, path string, err error) {
	path = w.fs.PathJoin(w.dir, fileName(first))
	f, err = w.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, "", fmt.Errorf("create %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			_ = w.fs.Remove(path)
		}
	}()
	if _, err := f.WriteAt(appendFileHeader(nil, first), 0); err != nil {
		return nil, "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := preallocate(f, capacity); err != nil {
		return nil, "", fmt.Errorf("preallocate %s: %w", path, err)
	}
	if err := w.syncFile(f); err != nil {
		return nil, "", fmt.Errorf("sync %s: %w", path, err)
	}
	if err := fsutil.SyncDir(w.fs, w.dir); err != nil {
		return nil, "", err
	}
	return f, path, nil
}

// preallocate reserves capacity bytes for f, so a full disk shows up when a
// file is created rather than in the middle of a group. Filesystems that
// cannot preallocate still work.
func preallocate(f vfs.File, capacity int64) error {
	err := f.Preallocate(0, capacity)
	if errors.Is(err, errors.ErrUnsupported) || errors.Is(err, vfs.ErrUnsupported) || errors.Is(err, syscall.EOPNOTSUPP) {
		return nil
	}
	return err
}

// mkdirAllSynced creates dir and any missing parents, and fsyncs the parent
// of each directory it creates, so the directories survive a crash.
func mkdirAllSynced(fs vfs.FS, dir string) error {
	var created []string
	for d := dir; ; d = fs.PathDir(d) {
		if _, err := fs.Stat(d); err == nil {
			break
		}
		created = append(created, d)
		if parent := fs.PathDir(d); parent == d {
			break
		}
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for i := len(created) - 1; i >= 0; i-- {
		if err := fsutil.SyncDir(fs, fs.PathDir(created[i])); err != nil {
			return err
		}
	}
	return nil
}

// RemoveBefore deletes every file all of whose records have an LSN below
// lsn; it never deletes the file being written. Files go oldest first, with
// a directory fsync after each, so a crash leaves a gapless run of files.
// One of them may be kept, out of the log, for reuse (spare.go).
// Safe for concurrent use; not to be called during Replay.
func (w *WAL) RemoveBefore(lsn LSN) error {
	w.removeMu.Lock()
	defer w.removeMu.Unlock()
	w.mu.Lock()
	err := w.usableLocked()
	w.mu.Unlock()
	if err != nil {
		return err
	}

	w.filesMu.Lock()
	n := 0
	// files[n] holds LSNs [files[n].first, files[n+1].first); the last file
	// (being written) has no successor and is never removed.
	for n+1 < len(w.files) && w.files[n+1].first <= lsn {
		n++
	}
	doomed := append([]fileMeta(nil), w.files[:n]...)
	w.filesMu.Unlock()

	removed := 0
	for i, fm := range doomed {
		// ReadAt stops reading the file before it goes: a reader
		// still in it finds the floor above its LSN when it is done,
		// and a recycled file's new life is never taken for the old.
		w.filesMu.Lock()
		w.rd.floor = w.files[i+1].first
		drop := w.uncacheLocked(fm.first)
		w.filesMu.Unlock()
		if drop != nil {
			closeRead(drop)
		}
		var kept bool
		if kept, err = w.recycle(fm); err != nil {
			break
		}
		if !kept {
			if err = w.fs.Remove(fm.path); err != nil {
				err = fmt.Errorf("remove %s: %w", fm.path, err)
				break
			}
		}
		removed++
		if err = fsutil.SyncDir(w.fs, w.dir); err != nil {
			break
		}
	}
	// Only RemoveBefore (serialised by removeMu) shortens files; the writer
	// only appends to it.
	w.filesMu.Lock()
	clear(w.files[:removed]) // their indexes go with them
	w.files = w.files[removed:]
	w.filesMu.Unlock()
	if removed > 0 {
		w.log.Debug("wal: removed files", "count", removed, "before_lsn", uint64(lsn))
	}
	return err
}
