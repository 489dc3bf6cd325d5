// Package overflow decides what a queue's length limits do (SPEC §4,
// reference B44–B51). It is pure: the broker asks, then carries the answer
// out as part of the same store operation as the publish that caused it.
//
// Limits count ready messages only (unacked ones do not count): x-max-length
// in messages, x-max-length-bytes in body bytes. Whichever is hit first
// applies. The behaviour when a publish would go over is the overflow mode:
//
//   - drop-head (default): the message is enqueued (a waiting consumer may
//     take it at once), then the oldest ready messages are removed until
//     the queue is within its limits; each is dead-lettered with reason
//     maxlen. A requeue can push the queue over; the head is then dropped
//     the same way (B46).
//   - reject-publish: a publish that would go over is refused (basic.nack
//     under confirms), checked before enqueue as len+1 > max or
//     bytes+size > max-bytes; requeues are never refused and may exceed the
//     limit (B48).
//   - reject-publish-dlx: as reject-publish, and the refused message is
//     dead-lettered with reason maxlen.
package overflow

import "fmt"

// Mode is the x-overflow behaviour.
type Mode int

// The modes; the zero value is the default, DropHead.
const (
	DropHead Mode = iota
	RejectPublish
	RejectPublishDLX
)

// ParseMode maps the x-overflow argument / overflow policy value.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "drop-head":
		return DropHead, nil
	case "reject-publish":
		return RejectPublish, nil
	case "reject-publish-dlx":
		return RejectPublishDLX, nil
	}
	return 0, fmt.Errorf("overflow: %q is not a valid overflow value", s)
}

func (m Mode) String() string {
	return [...]string{"drop-head", "reject-publish", "reject-publish-dlx"}[m]
}

// Limits are a queue's effective length limits. A negative limit means
// none.
type Limits struct {
	MaxLen   int64
	MaxBytes int64
	Mode     Mode
}

// None is a queue without limits.
var None = Limits{MaxLen: -1, MaxBytes: -1}

// Limited reports whether any limit is set.
func (l Limits) Limited() bool { return l.MaxLen >= 0 || l.MaxBytes >= 0 }

// Refuses reports whether a publish of a size-byte message to a queue with
// ready messages totalling readyBytes is refused (reject modes only).
func (l Limits) Refuses(ready int, readyBytes int64, size int) bool {
	if l.Mode == DropHead {
		return false
	}
	return (l.MaxLen >= 0 && int64(ready)+1 > l.MaxLen) ||
		(l.MaxBytes >= 0 && readyBytes+int64(size) > l.MaxBytes)
}

// Over reports whether a queue with ready messages totalling readyBytes is
// over its limits under drop-head, so its head must go. Under the reject
// modes it is always false: they refuse publishes instead, and let
// requeues exceed the limits (B48).
func (l Limits) Over(ready int, readyBytes int64) bool {
	if l.Mode != DropHead {
		return false
	}
	return (l.MaxLen >= 0 && int64(ready) > l.MaxLen) || (l.MaxBytes >= 0 && readyBytes > l.MaxBytes)
}
