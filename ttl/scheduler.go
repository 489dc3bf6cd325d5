package ttl

import (
	"math"
	"sync"
	"time"
)

// Clock is the scheduler's source of time; tests inject a fake one.
type Clock interface {
	// Now returns the current time; its unix milliseconds are compared with deadlines.
	Now() time.Time
	// NewTimer returns a started timer that sends on C after d.
	NewTimer(d time.Duration) ClockTimer
}

// ClockTimer is a timer of a Clock with the semantics of *time.Timer since Go 1.23: after
// Stop or Reset returns, no stale value is received from C.
type ClockTimer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// RealClock is the wall clock: time.Now and time.NewTimer.
var RealClock Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) ClockTimer { return realTimer{t: time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// maxClockStep is how far (ms) the clock may go backwards before the scheduler rebases its
// wheel. Below it, a timer added with a deadline between the clock and the wheel's time
// fires up to this much early; above it, rebasing costs O(timers) once per step.
const maxClockStep = 10

// maxKeptBatch bounds the capacity of the batch buffer kept between fires.
const maxKeptBatch = 1 << 16

// Scheduler runs a Wheel on its own goroutine and calls fire at each deadline. Add,
// Remove and Len are safe for concurrent use and never wait for fire.
type Scheduler struct {
	clock Clock
	fire  func(due []*Timer)

	mu    sync.Mutex
	wheel *Wheel
	// sleepUntil is the deadline the goroutine sleeps until (math.MaxInt64: no timer),
	// or math.MinInt64 while it is awake and will look at the wheel again anyway. An Add
	// of an earlier deadline wakes it.
	sleepUntil int64

	wake  chan struct{} // capacity 1: a pending wake-up
	batch []*Timer      // owned by the goroutine
	// syncs are closed when the goroutine next goes to sleep with
	// nothing due (Sync); guarded by mu.
	syncs []chan struct{}
	stop  chan struct{} // closed by Close
	done  chan struct{} // closed when the goroutine exits

	closeOnce sync.Once
}

// NewScheduler starts a scheduler that calls fire, from its own goroutine, with all the
// timers due at that moment (deadline <= clock's now, in unix ms), each exactly once, never
// before its deadline by the clock (but see maxClockStep for a clock that steps back). The
// timers are unscheduled before fire is called. due is valid only during the call. fire is
// called without the scheduler's lock held, so it may call Add and Remove, but not Close.
// A nil clock means real time.
func NewScheduler(clock Clock, fire func(due []*Timer)) *Scheduler {
	if fire == nil {
		panic("ttl: NewScheduler with nil fire")
	}
	if clock == nil {
		clock = realClock{}
	}
	s := &Scheduler{
		clock:      clock,
		fire:       fire,
		wheel:      NewWheel(clock.Now().UnixMilli()),
		sleepUntil: math.MinInt64,
		wake:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	go s.run()
	return s
}

// Add schedules t to fire at t.Deadline (rescheduling it if it is already scheduled in s),
// and wakes the scheduler if that is earlier than it sleeps for. A deadline already passed
// fires at once. The caller must not change t.Deadline while t is scheduled.
func (s *Scheduler) Add(t *Timer) {
	s.mu.Lock()
	s.wheel.Add(t)
	wake := t.Deadline < s.sleepUntil
	if wake {
		s.sleepUntil = t.Deadline
	}
	s.mu.Unlock()
	if wake {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// Remove unschedules t and reports whether it was scheduled. After false, t may be in a
// batch being passed to fire, or about to be.
func (s *Scheduler) Remove(t *Timer) bool {
	s.mu.Lock()
	ok := s.wheel.Remove(t)
	s.mu.Unlock()
	return ok
}

// Len returns the number of scheduled timers.
func (s *Scheduler) Len() int {
	s.mu.Lock()
	n := s.wheel.Len()
	s.mu.Unlock()
	return n
}

// Sync waits until every timer due by the clock when it is called has
// been passed to fire and fire has returned: the goroutine has looked at
// the wheel since, found nothing more due and gone to sleep. It returns at
// once if the scheduler is closed. A barrier for tests that move a fake
// clock and then assert what fired (or did not).
func (s *Scheduler) Sync() {
	ch := make(chan struct{})
	s.mu.Lock()
	s.syncs = append(s.syncs, ch)
	s.sleepUntil = math.MinInt64 // the goroutine must look again
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	select {
	case <-ch:
	case <-s.done:
	}
}

// Close stops the scheduler's goroutine and waits for it to exit (and so for a running
// fire to return). It is idempotent and must not be called from fire. Timers still
// scheduled never fire; Add and Remove keep working on the stopped wheel.
func (s *Scheduler) Close() {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.done
}

func (s *Scheduler) collect(t *Timer) { s.batch = append(s.batch, t) }

func (s *Scheduler) run() {
	defer close(s.done)
	var timer ClockTimer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-s.stop:
			return
		default:
		}

		nowT := s.clock.Now()
		now := nowT.UnixMilli()
		s.mu.Lock()
		if now < unkey(s.wheel.now)-maxClockStep {
			s.wheel.rebase(now)
		}
		s.wheel.Advance(now, s.collect)
		next := int64(math.MinInt64) // awake: will look again after fire
		var synced []chan struct{}
		if len(s.batch) == 0 {
			next = math.MaxInt64
			if d, ok := s.wheel.NextDeadline(); ok {
				next = d
			}
			synced, s.syncs = s.syncs, nil
		}
		s.sleepUntil = next
		s.mu.Unlock()
		for _, ch := range synced {
			close(ch)
		}

		if len(s.batch) > 0 {
			s.fire(s.batch)
			clear(s.batch)
			s.batch = s.batch[:0]
			if cap(s.batch) > maxKeptBatch {
				s.batch = nil
			}
			continue
		}

		var c <-chan time.Time
		if next != math.MaxInt64 {
			d := time.UnixMilli(next).Sub(nowT)
			if timer == nil {
				timer = s.clock.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			c = timer.C()
		} else if timer != nil {
			timer.Stop()
		}
		select {
		case <-c:
		case <-s.wake:
		case <-s.stop:
			return
		}
	}
}
