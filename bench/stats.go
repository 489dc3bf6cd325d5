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
// producers: each (producer, seq) must be seen once. A producer numbers
// its messages densely from 0, so each producer's arrivals are a bitset
// (a map cost the consumer a quarter of its CPU).
type tracker struct {
	mu         sync.Mutex
	seen       [][]uint64 // per producer, bit seq set once seq has arrived
	received   uint64
	duplicated uint64
}

// maxTrackedSeq bounds the bitsets: a seq this high is not one of ours.
const maxTrackedSeq = 1 << 36

func newTracker(producers int) *tracker {
	return &tracker{seen: make([][]uint64, producers)}
}

// record notes one arrival and reports whether it was new.
func (t *tracker) record(producer int, seq uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if producer < 0 || producer >= len(t.seen) || seq >= maxTrackedSeq {
		t.duplicated++ // not ours: count as a stray
		return false
	}
	bits := t.seen[producer]
	w, bit := seq/64, uint64(1)<<(seq%64)
	if w >= uint64(len(bits)) {
		bits = append(bits, make([]uint64, int(w)+1-len(bits))...)
		bits = bits[:cap(bits)]
		t.seen[producer] = bits
	}
	if bits[w]&bit != 0 {
		t.duplicated++
		return false
	}
	bits[w] |= bit
	t.received++
	return true
}

func (t *tracker) counts() (received, duplicated uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.received, t.duplicated
}
