package main

import (
	"math"
	"sort"
	"sync"
)

// latencies collects latency samples in milliseconds. Safe for concurrent
// use. It keeps every sample: runs are bounded (-n or -duration), and exact
// percentiles are worth a few MB.
type latencies struct {
	mu      sync.Mutex
	samples []float64
}

func (l *latencies) add(ms float64) {
	l.mu.Lock()
	l.samples = append(l.samples, ms)
	l.mu.Unlock()
}

// summary returns p50, p99 and max; zeros when there are no samples.
func (l *latencies) summary() (p50, p99, max float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.samples) == 0 {
		return 0, 0, 0
	}
	s := append([]float64(nil), l.samples...)
	sort.Float64s(s)
	return percentile(s, 50), percentile(s, 99), s[len(s)-1]
}

// percentile of sorted samples, nearest-rank.
func percentile(sorted []float64, p float64) float64 {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(rank-1, 0)]
}

// tracker verifies exactly-once arrival of numbered messages from several
// producers: each (producer, seq) must be seen once.
type tracker struct {
	mu         sync.Mutex
	seen       []map[uint64]struct{}
	received   uint64
	duplicated uint64
}

func newTracker(producers int) *tracker {
	t := &tracker{seen: make([]map[uint64]struct{}, producers)}
	for i := range t.seen {
		t.seen[i] = make(map[uint64]struct{})
	}
	return t
}

// record notes one arrival and reports whether it was new.
func (t *tracker) record(producer int, seq uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if producer < 0 || producer >= len(t.seen) {
		t.duplicated++ // not ours: count as a stray
		return false
	}
	if _, dup := t.seen[producer][seq]; dup {
		t.duplicated++
		return false
	}
	t.seen[producer][seq] = struct{}{}
	t.received++
	return true
}

func (t *tracker) counts() (received, duplicated uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.received, t.duplicated
}
