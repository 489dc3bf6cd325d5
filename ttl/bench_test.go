package ttl

import (
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkWheelAddRemove: the common case, a message consumed before it expires, with
// 100k other deadlines pending.
func BenchmarkWheelAddRemove(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	w := NewWheel(nowMs)
	pending := make([]Timer, 100_000)
	for i := range pending {
		pending[i].Deadline = nowMs + rng.Int64N(5000)
		w.Add(&pending[i])
	}
	timers := make([]Timer, 1024)
	for i := range timers {
		timers[i].Deadline = nowMs + 1 + rng.Int64N(5000)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := &timers[i&1023]
		w.Add(t)
		w.Remove(t)
	}
}

// BenchmarkWheelAdvance fires 100k timers spread over 5 s, either stepping 1 ms at a time
// (a scheduler waking at every deadline) or in one jump (a long gap).
func BenchmarkWheelAdvance(b *testing.B) {
	const n, span = 100_000, 5000
	rng := rand.New(rand.NewPCG(2, 2))
	deadlines := make([]int64, n)
	for i := range deadlines {
		deadlines[i] = nowMs + 1 + rng.Int64N(span)
	}
	timers := make([]Timer, n)
	for _, bc := range []struct {
		name string
		step int64
	}{{"step=1ms", 1}, {"jump=5s", span}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			fired := 0
			fire := func(*Timer) { fired++ }
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				w := NewWheel(nowMs)
				for j := range timers {
					timers[j].Deadline = deadlines[j]
					w.Add(&timers[j])
				}
				b.StartTimer()
				for now := int64(nowMs) + bc.step; now <= nowMs+span; now += bc.step {
					w.Advance(now, fire)
				}
			}
			if fired != n*b.N {
				b.Fatalf("fired %d, want %d", fired, n*b.N)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(fired), "ns/timer")
		})
	}
}

// BenchmarkSchedulerAddRemove: Add+Remove pairs from parallel goroutines (the broker's
// queues) on one scheduler.
func BenchmarkSchedulerAddRemove(b *testing.B) {
	s := NewScheduler(nil, func([]*Timer) {})
	defer s.Close()
	base := time.Now().UnixMilli() + 60_000
	var seed atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 0))
		timers := make([]Timer, 256)
		for i := range timers {
			timers[i].Deadline = base + rng.Int64N(5000)
		}
		i := 0
		for pb.Next() {
			t := &timers[i&255]
			s.Add(t)
			s.Remove(t)
			i++
		}
	})
}

// BenchmarkSchedulerPrecision measures, with the real clock, how late 100,000 timers with
// random deadlines 0.1-5 s ahead fire (added in random order). Run with -benchtime=1x:
// each iteration takes 5 s.
func BenchmarkSchedulerPrecision(b *testing.B) {
	const n = 100_000
	var p50, p99, pmax, early float64
	for i := 0; i < b.N; i++ {
		late := make([]float64, 0, n)
		done := make(chan struct{})
		s := NewScheduler(nil, func(due []*Timer) {
			now := time.Now()
			for _, t := range due {
				late = append(late, float64(now.Sub(time.UnixMilli(t.Deadline)))/float64(time.Millisecond))
			}
			if len(late) == n {
				close(done)
			}
		})
		rng := rand.New(rand.NewPCG(uint64(i), 3))
		timers := make([]Timer, n)
		start := time.Now().UnixMilli()
		for j := range timers {
			timers[j].Deadline = start + 100 + rng.Int64N(4901)
		}
		order := rng.Perm(n)
		for _, j := range order {
			s.Add(&timers[j])
		}
		<-done
		s.Close()
		slices.Sort(late)
		p50 += late[n/2]
		p99 += late[n*99/100]
		pmax = max(pmax, late[n-1])
		if late[0] < 0 {
			early++
		}
	}
	b.ReportMetric(p50/float64(b.N), "p50-late-ms")
	b.ReportMetric(p99/float64(b.N), "p99-late-ms")
	b.ReportMetric(pmax, "max-late-ms")
	b.ReportMetric(early, "runs-with-early-fire")
}
