package mgmt

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/brokerd/brokerd/broker/brokertest"
)

// A series keeps at most its levels' capacities however long it is
// sampled, an unchanging one a single sample per level, and answers for
// the past from the level that keeps it: the last 10 minutes every 5 s,
// the last hour every minute.
func TestSeriesRetention(t *testing.T) {
	const interval = 5000
	busy := newSeries(2, basicRetention, interval)
	idle := newSeries(2, basicRetention, interval)
	var ts int64
	for i := range 2000 { // 10,000 s of samples
		ts = int64(i+1) * interval
		busy.add(ts, []int64{int64(i), 7})
		idle.add(ts, []int64{3, 7})
	}
	if n0, n1 := busy.rings[0].n(), busy.rings[1].n(); n0 != 605/5+2 || n1 != 3600/60+2 {
		t.Errorf("a busy series holds %d and %d samples, want its levels' capacities %d and %d", n0, n1, 605/5+2, 3600/60+2)
	}
	if n0, n1 := idle.rings[0].n(), idle.rings[1].n(); n0 != 1 || n1 != 1 {
		t.Errorf("an idle series holds %d and %d samples, want 1 and 1", n0, n1)
	}
	// Sample i is i: the value at a time is the sample then.
	for _, c := range []struct {
		age, t, want int64
	}{
		{60_000, ts, 1999},                  // now
		{600_000, ts - 600_000, 1999 - 120}, // ten minutes ago, from the 5 s level
		{3_600_000, ts - 3_540_000, 1284},   // from the minute level: its sample before (every 12th)
	} {
		r := busy.ringFor(c.age, basicRetention)
		if got := busy.at(r, []int{0}, c.t); got != c.want {
			t.Errorf("value %d ms ago over an age of %d ms: %d, want %d", ts-c.t, c.age, got, c.want)
		}
	}
	if got := idle.at(idle.ringFor(3_600_000, basicRetention), []int{0, 1}, ts-3_000_000); got != 10 {
		t.Errorf("an idle series' value 50 minutes ago: %d, want 10", got)
	}
	if got := busy.at(&busy.rings[0], []int{0}, interval-1); got != 0 {
		t.Errorf("before the first sample: %d, want 0", got)
	}
}

// What a queue's samples hold in memory when its counters change at
// every sample for longer than the hour kept: the figure the package doc
// gives (11 counters, 123 + 62 samples).
func TestQueueSeriesHeapInUse(t *testing.T) {
	const queues, ticks = 1000, 1000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ss := make([]*series, queues)
	vals := make([]int64, qWidth)
	for i := range ss {
		ss[i] = newSeries(qWidth, basicRetention, 5000)
	}
	for k := range ticks {
		for i, s := range ss {
			for c := range vals {
				vals[c] = int64(k*(c+1) + i)
			}
			s.add(int64(k+1)*5000, vals)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / queues
	t.Logf("a busy queue's samples: %.0f bytes", per)
	if per > 20<<10 {
		t.Errorf("a busy queue's samples take %.0f bytes, over 20 KiB", per)
	}
	runtime.KeepAlive(ss)
}

// BenchmarkSample is one sample of a broker with 1,000 queues (each
// sample reads every counter and takes each queue's lock once).
func BenchmarkSample(b *testing.B) {
	inst := brokertest.Start(b, brokertest.Config{})
	_, ch := inst.Channel(b)
	for i := range 1000 {
		if _, err := ch.QueueDeclare(fmt.Sprintf("q%d", i), false, false, false, false, nil); err != nil {
			b.Fatal(err)
		}
	}
	sm := newSampler(inst.Broker, 5*time.Second, time.Now, nil)
	b.ReportAllocs()
	ts := time.UnixMilli(t0Bench)
	for b.Loop() {
		ts = ts.Add(5 * time.Second)
		sm.sample(ts)
	}
}

const t0Bench = 1_800_000_000_000
