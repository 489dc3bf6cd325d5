package ttl

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

const nowMs = 1_750_000_000_123 // a unix time in ms, not aligned to any level

// collect returns a fire func that appends to *fired.
func collect(fired *[]*Timer) func(*Timer) {
	return func(t *Timer) { *fired = append(*fired, t) }
}

func TestWheelFiresEachAtItsDeadline(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	w := NewWheel(nowMs)
	timers := make([]Timer, 2000)
	for i := range timers {
		timers[i].Deadline = nowMs + 1 + rng.Int64N(20_000) // up to level 2
		w.Add(&timers[i])
	}
	var fired []*Timer
	count := 0
	for now := int64(nowMs); now <= nowMs+20_001; now++ {
		fired = fired[:0]
		w.Advance(now, collect(&fired))
		for _, tm := range fired {
			if tm.Deadline != now {
				t.Fatalf("Advance(%d) fired deadline %d", now, tm.Deadline)
			}
		}
		count += len(fired)
	}
	if count != len(timers) || w.Len() != 0 {
		t.Fatalf("fired %d of %d, Len %d", count, len(timers), w.Len())
	}
}

func TestWheelOrderInOneAdvance(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 9))
	w := NewWheel(nowMs)
	timers := make([]Timer, 5000)
	for i := range timers {
		timers[i].Deadline = nowMs + 1 + rng.Int64N(1<<31) // up to level 5
		w.Add(&timers[i])
	}
	var fired []*Timer
	w.Advance(nowMs+1<<31, collect(&fired))
	if len(fired) != len(timers) {
		t.Fatalf("fired %d of %d", len(fired), len(timers))
	}
	if !slices.IsSortedFunc(fired, func(a, b *Timer) int { return int(a.Deadline - b.Deadline) }) {
		t.Fatal("timers fired out of deadline order")
	}
}

// Deadlines exactly at and next to level boundaries, from wheel times at and next to
// boundaries: not fired one ms before, fired at the deadline, NextDeadline exact.
func TestWheelLevelBoundaries(t *testing.T) {
	deltas := []int64{1, 2, 63, 64, 65, 127, 128, 4095, 4096, 4097, 262143, 262144, 262145,
		1<<24 - 1, 1 << 24, 1<<30 - 1, 1 << 30, 1<<36 - 1, 1 << 36, 1<<42 - 1, 1 << 42,
		1<<48 - 1, 1 << 48, 1<<48 + 1, 1 << 50, tenYearsMs}
	starts := []int64{0, 1, 63, 64, 4095, 4096, 1<<48 - 1, 1 << 48, nowMs, -1, -64}
	for _, start := range starts {
		for _, delta := range deltas {
			w := NewWheel(start)
			var tm Timer
			tm.Deadline = start + delta
			w.Add(&tm)
			if nd, ok := w.NextDeadline(); !ok || nd != tm.Deadline {
				t.Fatalf("start %d delta %d: NextDeadline = %d, %v", start, delta, nd, ok)
			}
			var fired []*Timer
			w.Advance(tm.Deadline-1, collect(&fired))
			if len(fired) != 0 {
				t.Fatalf("start %d delta %d: fired 1 ms early", start, delta)
			}
			if nd, ok := w.NextDeadline(); !ok || nd != tm.Deadline {
				t.Fatalf("start %d delta %d: after cascading, NextDeadline = %d, %v", start, delta, nd, ok)
			}
			checkInvariants(t, w)
			w.Advance(tm.Deadline, collect(&fired))
			if len(fired) != 1 || tm.Scheduled() || w.Len() != 0 {
				t.Fatalf("start %d delta %d: fired %d at the deadline", start, delta, len(fired))
			}
		}
	}
}

func TestWheelRemove(t *testing.T) {
	w := NewWheel(nowMs)
	var a, b, c Timer
	a.Deadline, b.Deadline, c.Deadline = nowMs+10, nowMs+10, nowMs+5000
	if w.Remove(&a) {
		t.Fatal("Remove of an unscheduled timer returned true")
	}
	w.Add(&a)
	w.Add(&b)
	w.Add(&c)
	if !w.Remove(&a) || w.Remove(&a) {
		t.Fatal("Remove should return true once")
	}
	if !w.Remove(&c) || w.Len() != 1 {
		t.Fatalf("Len = %d after removes", w.Len())
	}
	other := NewWheel(nowMs)
	if other.Remove(&b) {
		t.Fatal("Remove from a wheel that does not hold the timer returned true")
	}
	var fired []*Timer
	w.Advance(nowMs+10_000, collect(&fired))
	if len(fired) != 1 || fired[0] != &b {
		t.Fatalf("fired %v, want only b", fired)
	}
	checkInvariants(t, w)
}

func TestWheelAddReschedules(t *testing.T) {
	w := NewWheel(nowMs)
	var a Timer
	a.Deadline = nowMs + 100_000
	w.Add(&a)
	a.Deadline = nowMs + 50
	w.Add(&a)
	if w.Len() != 1 {
		t.Fatalf("Len = %d after rescheduling", w.Len())
	}
	var fired []*Timer
	w.Advance(nowMs+50, collect(&fired))
	if len(fired) != 1 {
		t.Fatal("rescheduled timer did not fire at its new deadline")
	}
	w.Advance(nowMs+200_000, collect(&fired))
	if len(fired) != 1 {
		t.Fatal("rescheduled timer fired twice")
	}
}

func TestWheelAddFromAnotherWheelPanics(t *testing.T) {
	w1, w2 := NewWheel(0), NewWheel(0)
	var a Timer
	a.Deadline = 10
	w1.Add(&a)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	w2.Add(&a)
}

func TestWheelPastDeadlines(t *testing.T) {
	w := NewWheel(nowMs)
	var a, b Timer
	a.Deadline = nowMs - 5000
	b.Deadline = nowMs
	w.Add(&a)
	w.Add(&b)
	if nd, ok := w.NextDeadline(); !ok || nd != a.Deadline {
		t.Fatalf("NextDeadline = %d, %v; want %d", nd, ok, a.Deadline)
	}
	var fired []*Timer
	// An earlier now does not move the wheel back but fires what is due.
	w.Advance(nowMs-10_000, collect(&fired))
	if len(fired) != 2 {
		t.Fatalf("fired %d past-due timers, want 2", len(fired))
	}
	if _, ok := w.NextDeadline(); ok {
		t.Fatal("NextDeadline ok on an empty wheel")
	}
	// The wheel's time did not go back: a deadline between then and now is due.
	var c Timer
	c.Deadline = nowMs - 1
	w.Add(&c)
	w.Advance(nowMs, collect(&fired))
	if len(fired) != 3 {
		t.Fatal("deadline before the wheel's time did not fire on the next Advance")
	}
}

func TestWheelReAddInFire(t *testing.T) {
	w := NewWheel(nowMs)
	var a Timer
	a.Deadline = nowMs + 10
	w.Add(&a)
	n := 0
	refire := func(tm *Timer) {
		n++
		if n < 5 {
			tm.Deadline += 10 // re-arm every 10 ms
			w.Add(tm)
		}
	}
	w.Advance(nowMs+1000, refire)
	if n != 1 || w.Len() != 1 {
		t.Fatalf("fired %d times in one Advance, Len %d; want 1, 1", n, w.Len())
	}
	// Re-added timers due by then wait for the next Advance (no loops inside one).
	for range 4 {
		w.Advance(nowMs+1000, refire)
	}
	if n != 5 || w.Len() != 0 {
		t.Fatalf("periodic re-add fired %d times, Len %d; want 5, 0", n, w.Len())
	}
	// A re-add beyond now goes into the wheel as usual.
	a.Deadline = nowMs + 1500
	w.Add(&a)
	w.Advance(nowMs+1500, func(tm *Timer) { tm.Deadline = nowMs + 1600; w.Add(tm) })
	if nd, _ := w.NextDeadline(); nd != nowMs+1600 || w.Len() != 1 {
		t.Fatalf("re-added timer: NextDeadline %d, Len %d", nd, w.Len())
	}
	w.Remove(&a)

	// Re-adding with a deadline that has passed must not loop inside Advance.
	a.Deadline = nowMs + 1001
	w.Add(&a)
	n = 0
	again := func(tm *Timer) { n++; w.Add(tm) }
	w.Advance(nowMs+2000, again)
	if n != 1 || w.Len() != 1 {
		t.Fatalf("past re-add: fired %d times, Len %d", n, w.Len())
	}
	w.Advance(nowMs+2000, again)
	if n != 2 {
		t.Fatal("past re-add did not fire on the next Advance")
	}
}

func TestWheelRemoveInFire(t *testing.T) {
	w := NewWheel(nowMs)
	var a, b Timer
	a.Deadline, b.Deadline = nowMs+100, nowMs+100
	w.Add(&a)
	w.Add(&b)
	var fired []*Timer
	w.Advance(nowMs+100, func(tm *Timer) {
		fired = append(fired, tm)
		other := &a
		if tm == &a {
			other = &b
		}
		if !w.Remove(other) {
			t.Fatal("Remove of a collected but unfired timer returned false")
		}
	})
	if len(fired) != 1 || w.Len() != 0 {
		t.Fatalf("fired %d, Len %d; want 1, 0", len(fired), w.Len())
	}
}

func TestWheelAdvanceFromFirePanics(t *testing.T) {
	w := NewWheel(0)
	var a Timer
	a.Deadline = 1
	w.Add(&a)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	w.Advance(1, func(*Timer) { w.Advance(2, func(*Timer) {}) })
}

func TestWheelFarDeadlines(t *testing.T) {
	w := NewWheel(nowMs)
	var ten, far, end Timer
	ten.Deadline = nowMs + tenYearsMs
	far.Deadline = nowMs + 1<<50 // beyond the wheel's span: overflow slot
	end.Deadline = math.MaxInt64
	w.Add(&ten)
	w.Add(&far)
	w.Add(&end)
	var fired []*Timer
	w.Advance(ten.Deadline-1, collect(&fired))
	if len(fired) != 0 {
		t.Fatal("fired early")
	}
	if nd, _ := w.NextDeadline(); nd != ten.Deadline {
		t.Fatalf("NextDeadline = %d, want %d", nd, ten.Deadline)
	}
	w.Advance(ten.Deadline, collect(&fired))
	if len(fired) != 1 || fired[0] != &ten {
		t.Fatal("10-year timer did not fire at its deadline")
	}
	if nd, _ := w.NextDeadline(); nd > far.Deadline {
		t.Fatalf("NextDeadline = %d, later than %d", nd, far.Deadline)
	}
	w.Advance(far.Deadline-1, collect(&fired))
	if len(fired) != 1 {
		t.Fatal("overflow timer fired early")
	}
	if nd, _ := w.NextDeadline(); nd != far.Deadline {
		t.Fatalf("after cascading, NextDeadline = %d, want %d", nd, far.Deadline)
	}
	w.Advance(far.Deadline, collect(&fired))
	w.Advance(math.MaxInt64-1, collect(&fired))
	if len(fired) != 2 {
		t.Fatalf("fired %d, want 2", len(fired))
	}
	w.Advance(math.MaxInt64, collect(&fired))
	if len(fired) != 3 || w.Len() != 0 {
		t.Fatal("MaxInt64 deadline did not fire at the end of time")
	}
	checkInvariants(t, w)
}

// A long gap must not be walked millisecond by millisecond: 100k timers spread over a
// year fire in one Advance that visits only occupied slots.
func TestWheelLongGapVisitsOnlyOccupiedSlots(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	w := NewWheel(nowMs)
	timers := make([]Timer, 100_000)
	for i := range timers {
		timers[i].Deadline = nowMs + rng.Int64N(365*24*3600*1000)
		w.Add(&timers[i])
	}
	n := 0
	w.Advance(nowMs+365*24*3600*1000, func(*Timer) { n++ })
	if n != len(timers) {
		t.Fatalf("fired %d of %d", n, len(timers))
	}
	// A jump over millions of years with nothing scheduled is one step too.
	w.Advance(math.MaxInt64/2, func(*Timer) { t.Fatal("fired on an empty wheel") })
}

func TestWheelNextDeadlineAfterRemove(t *testing.T) {
	w := NewWheel(0)
	var a, b Timer
	a.Deadline, b.Deadline = 5000, 5003 // same level-2 slot
	w.Add(&a)
	w.Add(&b)
	w.Remove(&a)
	nd, ok := w.NextDeadline()
	if !ok || nd > b.Deadline {
		t.Fatalf("NextDeadline = %d, %v; must not be later than %d", nd, ok, b.Deadline)
	}
	w.Advance(nd, func(*Timer) { t.Fatal("fired early") })
	if nd, _ := w.NextDeadline(); nd != b.Deadline {
		t.Fatalf("after the early wake-up NextDeadline = %d, want exactly %d", nd, b.Deadline)
	}
}

func TestWheelRebase(t *testing.T) {
	w := NewWheel(10_000)
	var a, b, c Timer
	a.Deadline, b.Deadline, c.Deadline = 9_000, 20_000, 1<<50
	w.Add(&a) // due
	w.Add(&b)
	w.Add(&c)
	w.rebase(1_000) // the clock stepped back
	checkInvariants(t, w)
	var fired []*Timer
	w.Advance(8_999, collect(&fired))
	if len(fired) != 0 {
		t.Fatal("fired before the deadline after rebasing")
	}
	w.Advance(20_000, collect(&fired))
	if len(fired) != 2 || w.Len() != 1 {
		t.Fatalf("fired %d, Len %d after rebasing", len(fired), w.Len())
	}
}

func TestWheelZeroAllocs(t *testing.T) {
	w := NewWheel(nowMs)
	timers := make([]Timer, 1000)
	for i := range timers {
		timers[i].Deadline = nowMs + int64(i*37)
	}
	now := int64(nowMs)
	fire := func(*Timer) {}
	allocs := testing.AllocsPerRun(20, func() {
		for i := range timers {
			w.Add(&timers[i])
		}
		for i := 0; i < len(timers); i += 2 {
			w.Remove(&timers[i])
		}
		now += 40_000
		w.Advance(now, fire)
		for i := range timers {
			timers[i].Deadline += 40_000
		}
		w.NextDeadline()
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per run, want 0", allocs)
	}
}

// TestTimerSize keeps the package doc's per-timer cost true.
func TestTimerSize(t *testing.T) {
	if got := unsafe.Sizeof(Timer{}); got != 48 {
		t.Fatalf("a Timer is %d bytes; the package doc says 48: update it", got)
	}
}
