// Package datadir owns brokerd's data directory: it creates it and holds
// an exclusive lock on it (flock on the file LOCK) for the life of the
// process, so two brokers never share one directory.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Dir is a locked data directory.
type Dir struct {
	Path string
	lock *os.File
}

// ErrLocked is returned by Open when another process holds the directory.
var ErrLocked = errors.New("datadir: locked by another process")

// Open creates path if needed and locks it.
func Open(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o750); err != nil {
		return nil, fmt.Errorf("create data directory %s: %w", path, err)
	}
	f, err := os.OpenFile(filepath.Join(path, "LOCK"), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &Dir{Path: path, lock: f}, nil
}

// Close releases the lock. Idempotent.
func (d *Dir) Close() error {
	if d.lock == nil {
		return nil
	}
	err := d.lock.Close() // closing the descriptor releases the flock
	d.lock = nil
	return err
}

// LockExisting locks the data directory path for a tool that must not
// change it (brokerd verify, repair): it creates nothing, and fails if
// path or its LOCK file (made by brokerd's first start) is missing.
func LockExisting(path string) (*Dir, error) {
	f, err := os.OpenFile(filepath.Join(path, "LOCK"), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("%s is not a brokerd data directory: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w (stop brokerd first)", path, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &Dir{Path: path, lock: f}, nil
}
