package wal

import (
	"errors"
	"fmt"
)

// ErrClosed is returned by Sync, Reserve, Replay and RemoveBefore after
// Close has started, and given to the done of an Append made after it.
var ErrClosed = errors.New("wal: closed")

// ErrReplayAfterAppend is returned by Replay once Append has been called:
// replay is recovery, and records appended since Open are not part of it.
var ErrReplayAfterAppend = errors.New("wal: replay after append")

// ErrRemoved is returned (wrapped) by Replay when it is asked to start
// below the first LSN still on disk: RemoveBefore deleted those records, so
// whoever asked for them has lost the state that covered them.
var ErrRemoved = errors.New("wal: records removed")

// CorruptError reports damage Open or Replay will not repair: anything but a
// torn tail of the last file. Data at and after Offset in File is not read.
type CorruptError struct {
	File   string // path of the damaged file
	Offset int64  // where the damage starts: the first byte not accepted
	Reason string // what was wrong there
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("wal: %s is corrupt at offset %d: %s", e.File, e.Offset, e.Reason)
}
