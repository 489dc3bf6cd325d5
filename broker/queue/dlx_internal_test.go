package queue

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/brokerd/brokerd/deadletter"
)

// The dead-letter cycle warning's rate limiter holds at most
// cycleLogPairs pairs, forgets a pair whose minute is over when it needs
// room, and forgets a deleted queue's pairs at once: it keeps no deleted
// queue alive and does not grow with the pairs ever seen.
func TestCycleLogBounded(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	b := &Env{cfg: Config{Now: func() time.Time { return now }}, Log: slog.New(slog.DiscardHandler)}
	h := &Host{Name: "/"}
	queue := func(i int) *Queue { return &Queue{Name: fmt.Sprint("q", i), Host: h} }
	src := queue(-1)
	for i := range 3 * cycleLogPairs {
		b.logCycle(src, queue(i), deadletter.Expired)
		if n := len(b.cycles.last); n > cycleLogPairs {
			t.Fatalf("%d pairs held after %d cycles within a minute, want at most %d", n, i+1, cycleLogPairs)
		}
	}
	now = now.Add(time.Minute)
	for i := range 3 * cycleLogPairs {
		b.logCycle(src, queue(i), deadletter.Expired)
	}
	for k := range b.cycles.last {
		if now.Sub(b.cycles.last[k]) >= time.Minute {
			t.Fatalf("pair %s→%s of a minute ago still held", k[0].Name, k[1].Name)
		}
	}
	var last *Queue
	for k := range b.cycles.last {
		last = k[1]
		break
	}
	last.deleted.Store(true)
	b.forgetCycles(last)
	for k := range b.cycles.last {
		if k[1] == last {
			t.Fatalf("pair of deleted queue %s still held", last.Name)
		}
	}
}
