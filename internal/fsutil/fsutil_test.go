package fsutil

import (
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

func TestSyncDir(t *testing.T) {
	for _, c := range []struct {
		name    string
		dir     string
		fail    errorfs.OpKind // injected on dir; -1: none
		wantErr string         // "" when none
	}{
		{name: "synced", dir: "d", fail: -1},
		{name: "missing", dir: "nope", fail: -1, wantErr: "open directory nope: "},
		{name: "open fails", dir: "d", fail: errorfs.OpOpenDir, wantErr: "open directory d: injected error"},
		{name: "sync fails", dir: "d", fail: errorfs.OpFileSync, wantErr: "sync directory d: injected error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := vfs.NewMem()
			if err := mem.MkdirAll("d", 0o755); err != nil {
				t.Fatal(err)
			}
			var ops []errorfs.OpKind
			fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
				if op.Path == c.dir {
					ops = append(ops, op.Kind)
					if op.Kind == c.fail {
						return errorfs.ErrInjected
					}
				}
				return nil
			}))
			err := SyncDir(fs, c.dir)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("SyncDir: %v", err)
			case c.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), c.wantErr)):
				t.Fatalf("SyncDir: %v, want %q…", err, c.wantErr)
			case c.fail >= 0 && !errors.Is(err, errorfs.ErrInjected):
				t.Fatalf("SyncDir: %v does not wrap the injected error", err)
			}
			if c.wantErr == "" && !hasKind(ops, errorfs.OpFileSync) {
				t.Errorf("ops on %s: %v, no sync", c.dir, ops)
			}
		})
	}
}

func hasKind(ops []errorfs.OpKind, k errorfs.OpKind) bool {
	for _, o := range ops {
		if o == k {
			return true
		}
	}
	return false
}

// closeFailFS fails the Close of every directory it opens (errorfs injects
// no errors into Close).
type closeFailFS struct{ vfs.FS }

type closeFailFile struct{ vfs.File }

var errClose = errors.New("close failed")

func (fs closeFailFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return closeFailFile{f}, nil
}

func (f closeFailFile) Close() error {
	f.File.Close()
	return errClose
}

// A Close that fails after the sync is an error as the sync's would be.
func TestSyncDirCloseFails(t *testing.T) {
	mem := vfs.NewMem()
	if err := mem.MkdirAll("d", 0o755); err != nil {
		t.Fatal(err)
	}
	err := SyncDir(closeFailFS{mem}, "d")
	if !errors.Is(err, errClose) || !strings.HasPrefix(err.Error(), "sync directory d: ") {
		t.Fatalf("SyncDir: %v, want the close's error", err)
	}
}
