package index

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrCorrupt is matched (errors.Is) by every error a Decode function
// returns: the bytes are not a valid encoding of what was asked for —
// truncated, trailing garbage, a wrong key prefix or length, a value out of
// range, a non-canonical varint, or an unknown format version. The concrete
// error is a *DecodeError saying what was decoded and where it failed.
var ErrCorrupt = errors.New("index: corrupt encoding")

// ErrUnknownVersion is matched, in addition to ErrCorrupt, when a value
// starts with a format version this build does not know: the value was
// written by a newer brokerd (a downgrade) or its first byte is damaged.
var ErrUnknownVersion = errors.New("index: unknown format version")

// DecodeError describes a failed decode. It matches ErrCorrupt and, when the
// format version is the problem, ErrUnknownVersion.
type DecodeError struct {
	What   string // what was decoded, e.g. "entry value", "expiry key"
	Offset int    // byte offset in the input where decoding failed
	Reason string // what was wrong there
	Err    error  // ErrCorrupt or ErrUnknownVersion
}

func (e *DecodeError) Error() string {
	return "decode " + e.What + ": " + e.Err.Error() + ": " + e.Reason +
		" at offset " + strconv.Itoa(e.Offset)
}

// Unwrap returns ErrCorrupt or ErrUnknownVersion.
func (e *DecodeError) Unwrap() error { return e.Err }

// Is reports whether target is ErrCorrupt: every DecodeError is one.
func (e *DecodeError) Is(target error) bool { return target == ErrCorrupt }

func corrupt(what string, off int, reason string) error {
	return &DecodeError{What: what, Offset: off, Reason: reason, Err: ErrCorrupt}
}

func corruptf(what string, off int, format string, args ...any) error {
	return corrupt(what, off, fmt.Sprintf(format, args...))
}
