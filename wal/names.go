package wal

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/cockroachdb/pebble/v2/vfs"
)

const (
	fileSuffix = ".wal"
	// fileNameLen is the length of every file name: 16 hex digits + suffix.
	fileNameLen = 16 + len(fileSuffix)
	lockName    = "LOCK"
)

// fileName returns the name of the file whose first record is first.
// parseFileName is its inverse.
func fileName(first LSN) string {
	return fmt.Sprintf("%016x%s", uint64(first), fileSuffix)
}

// parseFileName returns the first LSN a file name stands for, or false if
// name is not exactly what fileName produces for some LSN > 0.
func parseFileName(name string) (LSN, bool) {
	if len(name) != fileNameLen || name[16:] != fileSuffix {
		return 0, false
	}
	v, err := strconv.ParseUint(name[:16], 16, 64)
	if err != nil || v == 0 {
		return 0, false
	}
	if fileName(LSN(v)) != name { // upper-case hex, a sign: not ours
		return 0, false
	}
	return LSN(v), true
}

// listFiles returns the first LSNs of the log files in dir, ascending. Any
// name other than a log file, LOCK or the spare is an error: the directory
// belongs to the log alone.
func listFiles(fs vfs.FS, dir string) ([]LSN, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	firsts := make([]LSN, 0, len(names))
	for _, name := range names {
		if name == lockName || name == spareName {
			continue
		}
		first, ok := parseFileName(name)
		if !ok {
			return nil, fmt.Errorf("wal: unexpected file %q in %s (log files are named like %s)",
				name, dir, fileName(1))
		}
		firsts = append(firsts, first)
	}
	slices.Sort(firsts)
	return firsts, nil
}
