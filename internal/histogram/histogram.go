// Package histogram is a fixed-bucket histogram made of atomic counters,
// for the storage packages to observe latencies and sizes without a
// dependency on a metrics library: package metrics turns a Snapshot into a
// Prometheus histogram at scrape time.
package histogram

import (
	"math"
	"sync/atomic"
)

// Histogram counts observations into buckets with fixed upper bounds.
// Observe is lock-free (a few atomic adds) and safe for concurrent use with
// itself and Snapshot. A Snapshot is not one instant across buckets: an
// observation racing it may be in Count and not yet in its bucket.
type Histogram struct {
	bounds []float64
	counts []atomic.Uint64 // per bucket; the last is +Inf
	sum    atomic.Uint64   // math.Float64bits of the running sum
}

// New returns a histogram with upper bounds bounds (ascending; an implicit
// +Inf bucket follows).
func New(bounds ...float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			break
		}
	}
}

// Snapshot is a histogram's state.
type Snapshot struct {
	// Bounds are the buckets' upper bounds, without +Inf.
	Bounds []float64
	// Cumulative[i] counts observations <= Bounds[i].
	Cumulative []uint64
	Count      uint64
	Sum        float64
}

// Snapshot returns the current counts. The slices are the caller's.
func (h *Histogram) Snapshot() Snapshot {
	s := Snapshot{Bounds: append([]float64(nil), h.bounds...), Cumulative: make([]uint64, len(h.bounds))}
	var c uint64
	for i := range h.bounds {
		c += h.counts[i].Load()
		s.Cumulative[i] = c
	}
	s.Count = c + h.counts[len(h.bounds)].Load()
	s.Sum = math.Float64frombits(h.sum.Load())
	return s
}
