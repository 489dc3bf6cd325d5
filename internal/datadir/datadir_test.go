package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestLockIsExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: err = %v, want ErrLocked", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	d2, err := Open(path)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	d2.Close()
}

// TestLockExistingCreatesNothing: the lock of verify and repair fails on
// a directory brokerd never used, creating nothing, and excludes brokerd
// from one it did.
func TestLockExistingCreatesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	if _, err := LockExisting(path); err == nil {
		t.Fatal("LockExisting of a missing directory succeeded")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LockExisting created %s: %v", path, err)
	}
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	x, err := LockExisting(path)
	if err != nil {
		t.Fatalf("LockExisting of a used directory: %v", err)
	}
	defer x.Close()
	if _, err := Open(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("Open while LockExisting holds it: %v, want ErrLocked", err)
	}
}
