package amqp

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// logInterval is the period over which a logLimiter aggregates: at most
// about one line per interval for each kind of event.
const logInterval = time.Second

// logLimiter logs an event that a peer can cause at will — a refused login,
// a handshake that times out, a connection over the limit, an accept error
// while out of file descriptors — without letting the peer decide how much
// the server logs. The first event after a quiet interval is logged at once
// with its own attributes; later ones are counted, and at the end of every
// interval that had any, one line gives their number ("count") and the
// attributes of the last of them (group "last"). Every event is thus
// accounted for, in at most one line per interval plus one.
//
// Safe for concurrent use. stop flushes the count and ends the timer.
type logLimiter struct {
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

func newLogLimiter(log *slog.Logger, level slog.Level, msg string, interval time.Duration) *logLimiter {
	return &logLimiter{log: log, level: level, msg: msg, interval: interval}
}

// event records one event with its slog attributes (key-value pairs).
func (l *logLimiter) event(args ...any) {
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
func (l *logLimiter) tick() {
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

func (l *logLimiter) flushLocked() {
	l.log.Log(context.Background(), l.level, l.msg, "count", l.n, "interval", l.interval, slog.Group("last", l.last...))
	l.n, l.last = 0, nil
}

// stop logs the events counted so far, if any, and stops the timer; later
// events are logged one line each (there should be none: the server calls
// it once every connection has ended). Idempotent.
func (l *logLimiter) stop() {
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
