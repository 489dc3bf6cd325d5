package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrDamaged is matched (errors.Is) by every *DamageError.
var ErrDamaged = errors.New("store: damaged data")

// DamageError reports stored messages a read could not return because the
// data that holds them is damaged: a segment block that fails its
// checksum, or a log record dropped as damaged. It is not a failure of the
// store: every other message is read as usual, and the store goes on
// serving. LoadMessages returns it after calling fn for every message it
// could read; fn is not called for the messages it names, which are lost.
// A broker takes their entries out of their queues as a counted loss.
type DamageError struct {
	Damage []Damage // one per damaged place, in the order found
}

// Damage is one damaged place and the messages a read wanted from it.
type Damage struct {
	File   string // the damaged file
	Offset int64  // where in it: the damaged block or record
	Reason string // what is wrong there
	Msgs   []MsgID
}

func (e *DamageError) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "store: %d messages unreadable: damaged data", len(e.Msgs()))
	for i, d := range e.Damage {
		if i == 3 {
			fmt.Fprintf(&sb, "; and %d more places", len(e.Damage)-i)
			break
		}
		fmt.Fprintf(&sb, "; %s at offset %d (%s): %d messages", d.File, d.Offset, d.Reason, len(d.Msgs))
	}
	return sb.String()
}

// Is reports whether target is ErrDamaged.
func (e *DamageError) Is(target error) bool { return target == ErrDamaged }

// Msgs returns every message the damage holds, each once, ascending.
func (e *DamageError) Msgs() []MsgID {
	var out []MsgID
	for _, d := range e.Damage {
		out = append(out, d.Msgs...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Where returns the damage that holds id, or nil (also for a nil e).
func (e *DamageError) Where(id MsgID) *Damage {
	if e == nil {
		return nil
	}
	for i := range e.Damage {
		if slices.Contains(e.Damage[i].Msgs, id) {
			return &e.Damage[i]
		}
	}
	return nil
}
