package ratelog

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"
)

// recordLog keeps what is logged and signals each line on lines.
type recordLog struct {
	mu    sync.Mutex
	recs  []slog.Record
	lines chan struct{}
}

func newRecordLog() *recordLog { return &recordLog{lines: make(chan struct{}, 100)} }

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	h.lines <- struct{}{}
	return nil
}
func (h *recordLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordLog) WithGroup(string) slog.Handler      { return h }

func (h *recordLog) records() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), h.recs...)
}

// attrs flattens a record's attributes, groups as "group.key".
func attrs(r slog.Record) map[string]string {
	m := map[string]string{}
	var add func(prefix string, a slog.Attr)
	add = func(prefix string, a slog.Attr) {
		if a.Value.Kind() == slog.KindGroup {
			for _, g := range a.Value.Group() {
				add(prefix+a.Key+".", g)
			}
			return
		}
		m[prefix+a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { add("", a); return true })
	return m
}

// Within an interval only the first event is logged as it happens; stop
// logs how many followed, with the last one's attributes.
func TestLogLimiterCountsWithinInterval(t *testing.T) {
	h := newRecordLog()
	l := New(slog.New(h), slog.LevelWarn, "login refused", time.Hour)
	for i := range 50 {
		l.Event("user", string(rune('a'+i%26)))
	}
	recs := h.records()
	if len(recs) != 1 {
		t.Fatalf("%d lines during the interval, want 1", len(recs))
	}
	if got := attrs(recs[0]); got["user"] != "a" || got["count"] != "" {
		t.Fatalf("first line %v, want the first event's attributes and no count", got)
	}
	l.Stop()
	l.Stop()
	recs = h.records()
	if len(recs) != 2 {
		t.Fatalf("%d lines after stop, want 2", len(recs))
	}
	got := attrs(recs[1])
	if recs[1].Message != "login refused" || recs[1].Level != slog.LevelWarn || got["count"] != "49" || got["last.user"] != "x" {
		t.Fatalf("aggregate line %s %q %v, want WARN \"login refused\" count=49 last.user=x", recs[1].Level, recs[1].Message, got)
	}
	// After stop every event has its own line.
	l.Event("user", "late")
	if n := len(h.records()); n != 3 {
		t.Fatalf("%d lines after an event past stop, want 3", n)
	}
}

// The count is logged when the interval ends, without waiting for stop or
// another event.
func TestLogLimiterFlushesAtIntervalEnd(t *testing.T) {
	h := newRecordLog()
	l := New(slog.New(h), slog.LevelInfo, "handshake failed", 10*time.Millisecond)
	defer l.Stop()
	l.Event("n", 1)
	l.Event("n", 2)
	l.Event("n", 3)
	total := func() int {
		n := 0
		for _, r := range h.records() {
			if c, ok := attrs(r)["count"]; ok {
				k, err := strconv.Atoi(c)
				if err != nil {
					t.Fatalf("count %q", c)
				}
				n += k
			} else {
				n++
			}
		}
		return n
	}
	for total() < 3 {
		select {
		case <-h.lines:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d lines standing for %d events, want all 3 events logged", len(h.records()), total())
		}
	}
	recs := h.records()
	if total() != 3 || len(recs) > 3 {
		t.Fatalf("%d lines standing for %d events, want at most 3 for 3", len(recs), total())
	}
	if last := attrs(recs[len(recs)-1]); last["last.n"] != "3" && last["n"] != "3" {
		t.Fatalf("last line %v, want it to name the last event", last)
	}
}
