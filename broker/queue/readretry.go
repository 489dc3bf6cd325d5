package queue

import (
	"log/slog"
	"time"

	"github.com/brokerd/brokerd/internal/ratelog"
)

// Store reads that fail.
//
// A read of the store — a page of a queue, the deadlines within the
// horizon, paged entries due to expire, dead letters waiting for a route —
// that fails for a reason other than damage (damage is handled where it is
// met: the damaged messages are a counted loss, damage.go) loses nothing:
// the entries stay in the store. It is out of file descriptors, or an I/O
// error that may pass. So it is logged, aggregated, and the read is made
// again after readRetryDelay; the broker is not marked failed for it. Only
// the store's writes decide that: a failed WAL write or fsync comes back
// through Apply, and is sticky.

// ReadRetryDelay is how long a failed read waits before it is made again.
const ReadRetryDelay = time.Second

func newReadLog(log *slog.Logger) *ratelog.Limiter {
	return ratelog.New(log, slog.LevelError, "store read failed; retrying in a second", ratelog.Interval)
}

// ReadFailed logs a store read that failed and is retried.
func (b *Env) ReadFailed(err error) {
	b.Counters.ReadErrors.Add(1)
	b.readLog.Event("err", err)
}

// retryRead runs fn after readRetryDelay, as a background task: not once
// the broker closes, nor once the store failed for good (every read would
// fail again).
func (b *Env) retryRead(fn func()) {
	time.AfterFunc(ReadRetryDelay, func() {
		if b.StoreErr.Load() != nil || !b.goAsync() {
			return
		}
		defer b.asyncDone()
		fn()
	})
}
