// Package fsutil holds the file system steps the storage packages (wal,
// segment, diskstore) share, over the vfs.FS each is given, so that a test's
// in-memory or fault-injecting file system sees them too. It keeps no
// state; its functions are safe for concurrent use as far as the FS is.
package fsutil

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// SyncDir fsyncs directory dir, making the creation, removal and renaming
// of entries in it durable. The error names dir and wraps the cause: the
// open's, else the sync's, else the close's.
func SyncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
