// Package ratelog logs events that something outside the process controls
// the rate of — a peer's refused logins, dead letters a topology drops —
// in at most about one line per interval with a count.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Interval is the usual period over which a Limiter aggregates: at most
// about one line per interval for each kind of event.
const Interval = time.Second

// Limiter logs an event that a peer can cause at will — a refused login,
// a handshake that times out, a connection over the limit, an accept error
// while out of file descriptors — without letting the peer decide how much
// the server logs. The first event after a quiet interval is logged at once
// with its own attributes; later ones are counted, and at the end of every
// interval that had any, one line gives their number ("count") and the
// attributes of the last of them (group "last"). Every event is thus
// accounted for, in at most one line per interval plus one.
//
// Safe for concurrent use. Stop flushes the count and ends the timer.
type Limiter struct {
	log      *slog.Logger
	level    slog.Level
	msg      string
	interval time.Duration

	mu      sync.Mutex
	n       int         // events since the last line
	last    []any       // attributes of the latest of them
	timer   *time.Timer // runs while an interval is open; nil when quiet
	stopped bool
}

// New returns a limiter that logs msg at level, aggregating per interval.
func New(log *slog.Logger, level slog.Level, msg string, interval time.Duration) *Limiter {
	return &Limiter{log: log, level: level, msg: msg, interval: interval}
}

// Event records one event with its slog attributes (key-value pairs).
func (l *Limiter) Event(args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer == nil || l.stopped {
		l.log.Log(context.Background(), l.level, l.msg, args...)
		if !l.stopped {
			l.timer = time.AfterFunc(l.interval, l.tick)
		}
		return
	}
	l.n++
	l.last = args
}

// tick ends an interval: it logs what was counted in it and opens the next,
// or, if nothing was, lets the limiter fall quiet.
func (l *Limiter) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	if l.n == 0 {
		l.timer = nil
		return
	}
	l.flushLocked()
	l.timer.Reset(l.interval)
}

func (l *Limiter) flushLocked() {
	l.log.Log(context.Background(), l.level, l.msg, "count", l.n, "interval", l.interval, slog.Group("last", l.last...))
	l.n, l.last = 0, nil
}

// Stop logs the events counted so far, if any, and stops the timer; later
// events are logged one line each (there should be none: the server calls
// it once every connection has ended). Idempotent.
func (l *Limiter) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	l.stopped = true
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.n > 0 {
		l.flushLocked()
	}
}
