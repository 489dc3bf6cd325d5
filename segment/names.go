package segment

import (
	"fmt"
	"strconv"
	"strings"
)

// ID numbers a segment. IDs start at 1 and grow by one per new file; the
// next ID is one above the highest on disk (see the package doc).
type ID uint32

const fileSuffix = ".seg"

// fileName returns the name of segment id's file: eight lower-case hex
// digits and ".seg", so that names sort as IDs do.
func fileName(id ID) string { return fmt.Sprintf("%08x%s", uint32(id), fileSuffix) }

// FileName returns the name of segment id's file in its store's
// directory (a snapshot of the store links or copies it by that name).
func FileName(id ID) string { return fileName(id) }

// parseFileName returns the ID a segment file name stands for, or false if
// name is not one fileName makes.
func parseFileName(name string) (ID, bool) {
	hex, ok := strings.CutSuffix(name, fileSuffix)
	if !ok || len(hex) != 8 {
		return 0, false
	}
	v, err := strconv.ParseUint(hex, 16, 32)
	if err != nil || v == 0 || fileName(ID(v)) != name {
		return 0, false
	}
	return ID(v), true
}
