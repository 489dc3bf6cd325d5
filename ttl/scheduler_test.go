package ttl

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a Clock that moves only when the test says so. Waiters block on it with
// waitFor, which wakes on every change of its timers (no sleeping).
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced on every change
}

type fakeTimer struct {
	c      *fakeClock
	ch     chan time.Time
	when   time.Time
	active bool
}

func newFakeClock(ms int64) *fakeClock {
	return &fakeClock{now: time.UnixMilli(ms), changed: make(chan struct{})}
}

func (c *fakeClock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) ClockTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	t.armLocked(d)
	return t
}

func (t *fakeTimer) armLocked(d time.Duration) {
	select { // like Go 1.23 timers: no stale value after Reset or Stop
	case <-t.ch:
	default:
	}
	t.when, t.active = t.c.now.Add(d), true
	t.c.fireLocked()
	t.c.notifyLocked()
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	select {
	case <-t.ch:
	default:
	}
	t.c.notifyLocked()
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.armLocked(d)
	return was
}

func (c *fakeClock) fireLocked() {
	for _, t := range c.timers {
		if t.active && !t.when.After(c.now) {
			t.active = false
			t.ch <- c.now
		}
	}
}

// set moves the clock to ms (backwards too) and fires the timers that are due.
func (c *fakeClock) set(ms int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = time.UnixMilli(ms)
	c.fireLocked()
	c.notifyLocked()
}

// poke wakes waitFor callers, for conditions that are not about the clock.
func (c *fakeClock) poke() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notifyLocked()
}

func (c *fakeClock) advance(d time.Duration) {
	c.set(c.Now().Add(d).UnixMilli())
}

// waitFor waits until cond holds (called under the clock's lock), at most 5 s.
func (c *fakeClock) waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.After(5 * time.Second)
	for {
		c.mu.Lock()
		ok, ch := cond(), c.changed
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			tb.Fatalf("timed out waiting until %s", what)
		}
	}
}

// waitArmed waits until the scheduler sleeps with a timer that expires exactly at ms.
func (c *fakeClock) waitArmed(tb testing.TB, ms int64) {
	tb.Helper()
	c.waitFor(tb, "the scheduler sleeps until "+time.UnixMilli(ms).UTC().Format(time.StampMilli), func() bool {
		for _, t := range c.timers {
			if t.active && t.when.Equal(time.UnixMilli(ms)) {
				return true
			}
		}
		return false
	})
}

// batch is one call of fire: the timers and the clock's time then.
type batch struct {
	at     int64
	timers []*Timer
}

type recorder struct {
	clock   Clock
	batches chan batch
}

func newRecorder(clock Clock) *recorder {
	return &recorder{clock: clock, batches: make(chan batch, 1000)}
}

func (r *recorder) fire(due []*Timer) {
	r.batches <- batch{at: r.clock.Now().UnixMilli(), timers: slices.Clone(due)}
}

func (r *recorder) next(tb testing.TB) batch {
	tb.Helper()
	select {
	case b := <-r.batches:
		return b
	case <-time.After(5 * time.Second):
		tb.Fatal("timed out waiting for fire")
		return batch{}
	}
}

func (r *recorder) none(tb testing.TB) {
	tb.Helper()
	select {
	case b := <-r.batches:
		tb.Fatalf("unexpected fire at %d of %d timers", b.at, len(b.timers))
	default:
	}
}

const t0 = 1_750_000_000_000

func TestSchedulerFiresAtDeadline(t *testing.T) {
	clock := newFakeClock(t0)
	rec := newRecorder(clock)
	s := NewScheduler(clock, rec.fire)
	defer s.Close()

	var a Timer
	a.Deadline = t0 + 1000
	s.Add(&a)
	clock.waitArmed(t, t0+1000) // sleeps exactly until the deadline
	clock.advance(999 * time.Millisecond)
	rec.none(t)
	clock.advance(time.Millisecond)
	b := rec.next(t)
	if b.at != a.Deadline || len(b.timers) != 1 || b.timers[0] != &a {
		t.Fatalf("fired %d timers at %d, want a at %d", len(b.timers), b.at, a.Deadline)
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d after firing", s.Len())
	}
}

func TestSchedulerBatchesDueTimers(t *testing.T) {
	clock := newFakeClock(t0)
	rec := newRecorder(clock)
	s := NewScheduler(clock, rec.fire)
	defer s.Close()

	same := make([]Timer, 100)
	for i := range same {
		same[i].Deadline = t0 + 500
		s.Add(&same[i])
	}
	var later, much Timer
	later.Deadline = t0 + 501
	much.Deadline = t0 + 10_000
	s.Add(&later)
	s.Add(&much)
	clock.waitArmed(t, t0+500)
	clock.advance(500 * time.Millisecond)
	if b := rec.next(t); len(b.timers) != len(same) || b.at != t0+500 {
		t.Fatalf("first batch: %d timers at %d, want %d at %d", len(b.timers), b.at, len(same), t0+500)
	}
	// Two different deadlines passed by one clock jump: one batch.
	clock.waitArmed(t, t0+501)
	clock.advance(20 * time.Second)
	b := rec.next(t)
	if len(b.timers) != 2 || b.timers[0] != &later || b.timers[1] != &much {
		t.Fatalf("after a jump: batch of %d timers, want [later much]", len(b.timers))
	}
}

func TestSchedulerEarlierAddWakes(t *testing.T) {
	clock := newFakeClock(t0)
	rec := newRecorder(clock)
	s := NewScheduler(clock, rec.fire)
	defer s.Close()

	var far, near Timer
	far.Deadline = t0 + 10_000
	near.Deadline = t0 + 1000
	s.Add(&far)
	clock.waitArmed(t, t0+10_000)
	s.Add(&near)
	clock.waitArmed(t, t0+1000) // woke up and re-armed for the earlier deadline
	clock.advance(time.Second)
	if b := rec.next(t); len(b.timers) != 1 || b.timers[0] != &near {
		t.Fatal("want near alone")
	}
	clock.waitArmed(t, t0+10_000)
}

func TestSchedulerPastDeadlineFiresAtOnce(t *testing.T) {
	clock := newFakeClock(t0)
	rec := newRecorder(clock)
	s := NewScheduler(clock, rec.fire)
	defer s.Close()

	var a Timer
	a.Deadline = t0 - 60_000
	s.Add(&a)
	if b := rec.next(t); len(b.timers) != 1 || b.at != t0 {
		t.Fatal("past deadline did not fire at once")
	}
}

func TestSchedulerRemovePreventsFiring(t *testing.T) {
	clock := newFakeClock(t0)
	rec := newRecorder(clock)
	s := NewScheduler(clock, rec.fire)
	defer s.Close()

	var a, sentinel Timer
	a.Deadline = t0 + 1000
	sentinel.Deadline = t0 + 2000
	s.Add(&a)
	clock.waitArmed(t, t0+1000)
	if !s.Remove(&a) || s.Remove(&a) {
		t.Fatal("Remove should succeed once")
	}
	s.Add(&sentinel)
	clock.advance(time.Second) // the scheduler still wakes at a's old deadline
	clock.waitArmed(t, t0+2000)
	clock.advance(time.Second)
	if b := rec.next(t); len(b.timers) != 1 || b.timers[0] != &sentinel {
		t.Fatal("removed timer fired")
	}
	rec.none(t)
}

// The broker calls Add and Remove under its queue locks while fire takes them: Add and
// Remove must not wait for a running fire, and fire may call them.
func TestSchedulerAddRemoveDoNotWaitForFire(t *testing.T) {
	clock := newFakeClock(t0)
	inFire := make(chan struct{})
	release := make(chan struct{})
	var s *Scheduler
	var refired atomic.Int32
	var a, b, c Timer
	s = NewScheduler(clock, func(due []*Timer) {
		for _, tm := range due {
			switch tm {
			case &a:
				inFire <- struct{}{}
				<-release
				b.Deadline = t0 + 3000 // fire may Add, even an earlier deadline
				s.Add(&b)
				s.Remove(&c)
			case &b:
				refired.Add(1)
				clock.poke()
			}
		}
	})
	defer s.Close()

	a.Deadline = t0 + 1000
	c.Deadline = t0 + 5000
	s.Add(&a)
	s.Add(&c)
	clock.waitArmed(t, t0+1000)
	clock.advance(time.Second)
	<-inFire
	done := make(chan struct{})
	go func() {
		defer close(done)
		var d Timer
		d.Deadline = t0 + 100_000
		s.Add(&d)
		s.Remove(&d)
		_ = s.Len()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Add/Remove blocked while fire was running")
	}
	close(release)
	clock.waitArmed(t, t0+3000)
	clock.advance(10 * time.Second)
	clock.waitFor(t, "b fired", func() bool { return refired.Load() == 1 })
	if s.Len() != 0 {
		t.Fatalf("Len = %d, want 0 (c removed from fire)", s.Len())
	}
}

func TestSchedulerClockStepsBack(t *testing.T) {
	clock := newFakeClock(t0)
	rec := newRecorder(clock)
	s := NewScheduler(clock, rec.fire)
	defer s.Close()

	var a, b Timer
	a.Deadline = t0 + 60_000
	s.Add(&a)
	clock.waitArmed(t, t0+60_000)
	clock.set(t0 + 30_000)
	clock.waitArmed(t, t0+60_000)
	clock.set(t0) // steps back 30 s; the wheel's time is ahead of the clock
	b.Deadline = t0 + 1000
	s.Add(&b)                   // before the wheel's time: must still wait for the clock
	clock.waitArmed(t, t0+1000) // rebased, not fired
	rec.none(t)
	clock.advance(time.Second)
	if bt := rec.next(t); len(bt.timers) != 1 || bt.timers[0] != &b || bt.at != b.Deadline {
		t.Fatal("want b alone at its deadline after the clock stepped back")
	}
	clock.waitArmed(t, t0+60_000)
}

func TestSchedulerCloseWaitsForFire(t *testing.T) {
	clock := newFakeClock(t0)
	inFire := make(chan struct{})
	release := make(chan struct{})
	var returned atomic.Bool
	s := NewScheduler(clock, func([]*Timer) {
		close(inFire)
		<-release
		returned.Store(true)
	})
	var a Timer
	a.Deadline = t0
	s.Add(&a)
	<-inFire
	closed := make(chan bool)
	go func() {
		s.Close()
		closed <- returned.Load()
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while fire was running")
	case <-time.After(20 * time.Millisecond): // bounded: Close must still be waiting
	}
	close(release)
	if !<-closed {
		t.Fatal("Close returned before fire did")
	}
	s.Close() // idempotent
}

func TestSchedulerCloseIdleAndAfterClose(t *testing.T) {
	clock := newFakeClock(t0)
	s := NewScheduler(clock, func([]*Timer) { t.Error("fired after Close") })
	s.Close()
	s.Close()
	var a Timer
	a.Deadline = t0
	s.Add(&a) // still safe; never fires
	clock.advance(time.Hour)
	if !s.Remove(&a) {
		t.Fatal("Remove after Close")
	}
}

// With the real clock: a timer fires, not before its deadline and within a bound.
func TestSchedulerRealClock(t *testing.T) {
	fired := make(chan int64, 1)
	s := NewScheduler(nil, func(due []*Timer) { fired <- time.Now().UnixMilli() })
	defer s.Close()
	var a Timer
	a.Deadline = time.Now().UnixMilli() + 20
	s.Add(&a)
	select {
	case at := <-fired:
		if at < a.Deadline {
			t.Fatalf("fired %d ms early", a.Deadline-at)
		}
		if late := at - a.Deadline; late > 1000 {
			t.Fatalf("fired %d ms late", late)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("did not fire")
	}
}

func TestSchedulerConcurrentUse(t *testing.T) {
	clock := newFakeClock(t0)
	var fired atomic.Int64
	s := NewScheduler(clock, func(due []*Timer) {
		fired.Add(int64(len(due)))
		clock.poke()
	})
	defer s.Close()

	var removed atomic.Int64
	const workers, per = 4, 500
	timers := make([]Timer, workers*per)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := g * per; i < (g+1)*per; i++ {
				timers[i].Deadline = t0 + int64(i%50)*10
				s.Add(&timers[i])
				if i%3 == 0 && s.Remove(&timers[i]) {
					removed.Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			clock.advance(5 * time.Millisecond)
		}
	})
	wg.Wait()
	clock.advance(time.Second)
	want := int64(len(timers)) - removed.Load()
	clock.waitFor(t, "all timers fired", func() bool { return fired.Load() >= want })
	if fired.Load() != want {
		t.Fatalf("fired %d, want %d", fired.Load(), want)
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d", s.Len())
	}
}

// Sync returns once everything due when it was called has been fired and
// fire has returned, and not before; what is not due yet does not fire.
// After Close it returns at once.
func TestSchedulerSync(t *testing.T) {
	clock := newFakeClock(t0)
	release := make(chan struct{})
	var returned atomic.Int32
	fired := make(chan []*Timer, 10)
	s := NewScheduler(clock, func(due []*Timer) {
		<-release
		fired <- slices.Clone(due)
		returned.Add(1)
	})
	var a, b Timer
	a.Deadline, b.Deadline = t0+100, t0+200
	s.Add(&a)
	s.Add(&b)
	s.Sync() // nothing due: returns
	if n := returned.Load(); n != 0 {
		t.Fatalf("%d fires before any deadline", n)
	}
	clock.advance(150 * time.Millisecond)
	synced := make(chan int32)
	go func() { s.Sync(); synced <- returned.Load() }()
	close(release)
	if n := <-synced; n != 1 {
		t.Fatalf("Sync returned after %d fires returned, want 1 (a's)", n)
	}
	if got := <-fired; len(got) != 1 || got[0] != &a {
		t.Fatalf("fired %d timers, want a alone", len(got))
	}
	select {
	case got := <-fired:
		t.Fatalf("fired %d more timers after Sync; b is due at %d, the clock is at %d", len(got), b.Deadline, t0+150)
	default:
	}
	s.Close()
	s.Sync()
}
