package wal

import (
	"errors"
	"fmt"
)

// ErrClosed is returned by Sync, Reserve, Replay, ReadAt and RemoveBefore
// after Close has started, and given to the done of an Append made after
// it.
var ErrClosed = errors.New("wal: closed")

// ErrReplayAfterAppend is returned by Replay once Append has been called:
// replay is recovery, and records appended since Open are not part of it.
var ErrReplayAfterAppend = errors.New("wal: replay after append")

// ErrRemoved is returned (wrapped) by Replay when it is asked to start
// below the first LSN still on disk, and by ReadAt for a record below it:
// RemoveBefore deleted those records, so whoever asked for them has lost
// the state that covered them (a Raft follower that needs them gets a
// snapshot instead).
var ErrRemoved = errors.New("wal: records removed")

// ErrNotWritten is returned (wrapped) by ReadAt for an LSN beyond the
// records written: not appended yet, or appended and not yet written to
// its file.
var ErrNotWritten = errors.New("wal: record not written yet")

// CorruptError reports damage in a log file: what Open refuses (anything
// but a torn tail of the last file, unless Options.Covered covers it) and
// what Check reports. Open writes nothing when it returns one; Repair drops
// exactly the records it names.
type CorruptError struct {
	File   string // path of the damaged file
	Offset int64  // where the damage starts: the first byte not accepted
	Reason string // what was wrong there

	// What the damage holds, as far as the bytes after it say. FirstLSN …
	// LastLSN are the records lost in it: those between the last intact
	// record before it and the first intact one after it (in this file,
	// or the next file's first). LastLSN is 0 when that is unknown (the
	// end of the last file), and below FirstLSN when no record is lost
	// (bytes that are not a record between two that follow each other).
	FirstLSN, LastLSN LSN
	// End is the offset of the first intact record after the damage, the
	// first of IntactAfter records in an unbroken chain, NextLSN …
	// IntactLast; 0 (with IntactAfter 0) when no intact record follows in
	// File.
	End                 int64
	NextLSN, IntactLast LSN
	IntactAfter         int
	// Header: the file header is damaged (Offset 0); the records after it
	// were read as if it named the file's first LSN.
	Header bool
	// Torn: in the last file, the damage looks like a write that never
	// completed — nothing intact follows, or the damaged span holds a
	// sector that was never written (all zeros, or a reused file's
	// earlier records): Open drops everything from Offset on.
	Torn bool
	// Covered: every record lost is at or below Options.Covered, so the
	// damage costs nothing and Open steps over it.
	Covered bool
}

func (e *CorruptError) Error() string {
	msg := fmt.Sprintf("wal: %s is corrupt at offset %d: %s", e.File, e.Offset, e.Reason)
	switch {
	case e.LastLSN != 0 && e.LastLSN < e.FirstLSN:
		msg += "; no record is lost"
	case e.LastLSN == e.FirstLSN:
		msg += fmt.Sprintf("; record %d is lost", e.FirstLSN)
	case e.LastLSN != 0:
		msg += fmt.Sprintf("; records %d–%d (%d) are lost", e.FirstLSN, e.LastLSN, e.LastLSN-e.FirstLSN+1)
	case e.FirstLSN != 0:
		msg += fmt.Sprintf("; records from %d on are lost", e.FirstLSN)
	}
	if e.IntactAfter > 0 {
		msg += fmt.Sprintf("; %d intact records follow at offset %d (LSN %d–%d)", e.IntactAfter, e.End, e.NextLSN, e.IntactLast)
	}
	return msg
}

// Lost returns how many records the damage holds, and false when that is
// not known.
func (e *CorruptError) Lost() (uint64, bool) {
	switch {
	case e.LastLSN == 0:
		return 0, false
	case e.LastLSN < e.FirstLSN:
		return 0, true
	}
	return uint64(e.LastLSN-e.FirstLSN) + 1, true
}
