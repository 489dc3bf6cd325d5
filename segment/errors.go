package segment

import (
	"errors"
	"fmt"
)

// ErrClosed is returned by every Store and Writer method once Close has
// started.
var ErrClosed = errors.New("segment: closed")

// ErrWriterActive is returned by NewWriter while another Writer has been
// neither finished nor aborted: a store has one writer at a time.
var ErrWriterActive = errors.New("segment: another writer is active")

// ErrWriterDone is returned by Add and Finish after the Writer was finished
// or aborted.
var ErrWriterDone = errors.New("segment: writer already finished")

// ErrBusy is returned (wrapped) by Read, ReadMany, Scan and Remove for a
// segment the current Writer is writing: its locations are not readable
// before Finish, and it is not the caller's to delete.
var ErrBusy = errors.New("segment: segment is being written")

// ErrNotFound is returned (wrapped) for a segment ID with no file.
var ErrNotFound = errors.New("segment: no such segment")

// ErrBlobTooLarge is returned by Add for a blob above MaxBlobSize. It does
// not end the Writer.
var ErrBlobTooLarge = errors.New("segment: blob too large")

// ErrBadLoc is returned (wrapped) by DecodeLoc for bytes AppendLoc did not
// make.
var ErrBadLoc = errors.New("segment: bad location encoding")

// ErrForeignFile is returned (wrapped) by Open when the directory holds a
// name that is not a segment file: it is not ours, and guessing is how data
// is lost.
var ErrForeignFile = errors.New("segment: foreign file in segment directory")

// CorruptError reports bytes on disk that are not what this package wrote:
// a bad file header at Open, or a block (or a location inside it) that does
// not check out on Read, ReadMany or Scan. Nothing from the damaged block is
// returned.
type CorruptError struct {
	File   string // path of the damaged file
	Offset int64  // where the damage was found: the file header field, or the start of the block
	Reason string // what was wrong there
	err    error  // the kind of damage, for errors.Is in tests
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("segment: %s is corrupt at offset %d: %s", e.File, e.Offset, e.Reason)
}

func (e *CorruptError) Unwrap() error { return e.err }

// corrupt builds a *CorruptError for the block or header at off of path.
func corrupt(path string, off int64, err error) *CorruptError {
	return &CorruptError{File: path, Offset: off, Reason: err.Error(), err: err}
}
