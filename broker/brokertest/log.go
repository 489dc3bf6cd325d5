package brokertest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// Log is a slog.Handler that records the lines logged at or above its
// level, for tests that check what the broker or the server logs:
// Config.Broker.Logger = slog.New(log). Attributes a logger was made With
// come first in each line, groups flattened into dotted keys ("last.queue");
// WithGroup is ignored. Safe for concurrent use.
type Log struct {
	level slog.Level
	with  []Attr
	rec   *logRecords
}

type logRecords struct {
	mu      sync.Mutex
	lines   []Line
	taken   int           // lines[:taken] were returned by Take
	changed chan struct{} // closed and replaced on every line
}

// Line is one line logged.
type Line struct {
	Level slog.Level
	Msg   string
	Attrs []Attr
}

// Attr is an attribute of a Line, its value as slog.Value.String gives it.
type Attr struct{ Key, Value string }

// NewLog returns a Log that records the lines at level and above
// (slog.LevelDebug for every line).
func NewLog(level slog.Level) *Log {
	return &Log{level: level, rec: &logRecords{changed: make(chan struct{})}}
}

// Enabled implements slog.Handler.
func (l *Log) Enabled(_ context.Context, level slog.Level) bool { return level >= l.level }

// Handle implements slog.Handler.
func (l *Log) Handle(_ context.Context, r slog.Record) error {
	ln := Line{Level: r.Level, Msg: r.Message, Attrs: append([]Attr(nil), l.with...)}
	r.Attrs(func(a slog.Attr) bool { ln.Attrs = flatten(ln.Attrs, "", a); return true })
	l.rec.mu.Lock()
	l.rec.lines = append(l.rec.lines, ln)
	close(l.rec.changed)
	l.rec.changed = make(chan struct{})
	l.rec.mu.Unlock()
	return nil
}

// WithAttrs implements slog.Handler.
func (l *Log) WithAttrs(as []slog.Attr) slog.Handler {
	with := append([]Attr(nil), l.with...)
	for _, a := range as {
		with = flatten(with, "", a)
	}
	return &Log{level: l.level, with: with, rec: l.rec}
}

// WithGroup implements slog.Handler; the group is ignored.
func (l *Log) WithGroup(string) slog.Handler { return l }

func flatten(dst []Attr, prefix string, a slog.Attr) []Attr {
	if a.Value.Kind() == slog.KindGroup {
		for _, g := range a.Value.Group() {
			dst = flatten(dst, prefix+a.Key+".", g)
		}
		return dst
	}
	return append(dst, Attr{prefix + a.Key, a.Value.String()})
}

// Lines returns every line recorded so far, in order.
func (l *Log) Lines() []Line {
	l.rec.mu.Lock()
	defer l.rec.mu.Unlock()
	return append([]Line(nil), l.rec.lines...)
}

// Take returns the lines recorded since the last Take, as Line.String
// gives them.
func (l *Log) Take() []string {
	l.rec.mu.Lock()
	defer l.rec.mu.Unlock()
	var out []string
	for _, ln := range l.rec.lines[l.rec.taken:] {
		out = append(out, ln.String())
	}
	l.rec.taken = len(l.rec.lines)
	return out
}

// Await waits up to d for the n-th line (from 1) whose message is msg and
// returns it; it fails the test if none comes.
func (l *Log) Await(t testing.TB, d time.Duration, msg string, n int) Line {
	t.Helper()
	deadline := time.After(d)
	for {
		l.rec.mu.Lock()
		seen := 0
		for _, ln := range l.rec.lines {
			if ln.Msg == msg {
				if seen++; seen == n {
					l.rec.mu.Unlock()
					return ln
				}
			}
		}
		changed := l.rec.changed
		l.rec.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%d lines %q logged within %v, want %d", seen, msg, d, n)
		}
	}
}

// Get returns the value of the line's attribute key (its first, if
// several).
func (ln Line) Get(key string) (string, bool) {
	for _, a := range ln.Attrs {
		if a.Key == key {
			return a.Value, true
		}
	}
	return "", false
}

// Map returns the line's attributes by key (the last of a key wins).
func (ln Line) Map() map[string]string {
	m := make(map[string]string, len(ln.Attrs))
	for _, a := range ln.Attrs {
		m[a.Key] = a.Value
	}
	return m
}

// String returns the message followed by each attribute as key="value".
func (ln Line) String() string {
	var sb strings.Builder
	sb.WriteString(ln.Msg)
	for _, a := range ln.Attrs {
		fmt.Fprintf(&sb, " %s=%q", a.Key, a.Value)
	}
	return sb.String()
}
