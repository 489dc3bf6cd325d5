package brokertest

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/brokerd/brokerd/ttl"
)

// Clock is a fake clock whose time moves only by Advance. Config.Clock
// makes it both the broker's clock (broker.Options.Now) and its timers'
// (broker.Options.TimerClock, the view Timers returns), so both see the
// same time; timers fire as Advance passes them. Safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
	// read is, for each goroutine, the time it last read through
	// Timers().Now. Code computes a timer's duration from its own reading,
	// so a timer is armed relative to that: a test's Advance between the
	// reading and the arming must not push the deadline later. It is per
	// goroutine because another's reading after the Advance (the expiry
	// scheduler's while a redrive task arms its pace) says nothing about
	// when this one computed its duration.
	read   map[uint64]time.Time
	timers []*clockTimer
}

type clockTimer struct {
	c      *Clock
	ch     chan time.Time
	at     time.Time
	active bool
}

// NewClock returns a Clock at a fixed time (in November 2023).
func NewClock() *Clock {
	now := time.UnixMilli(1_700_000_000_000)
	return &Clock{now: now, read: map[uint64]time.Time{}}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d and fires the timers that are due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, tm := range c.timers {
		if tm.active && !tm.at.After(c.now) {
			tm.fireLocked()
		}
	}
}

// ArmedAt reports whether a timer of c is set to fire at t.
func (c *Clock) ArmedAt(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tm := range c.timers {
		if tm.active && tm.at.Equal(t) {
			return true
		}
	}
	return false
}

// Timers returns the ttl.Clock view of c for the broker's timers (one
// broker at a time: a restarted broker's replace the closed one's).
func (c *Clock) Timers() ttl.Clock { return timerClock{c} }

type timerClock struct{ c *Clock }

func (tc timerClock) Now() time.Time {
	c := tc.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.read[goid()] = c.now
	return c.now
}

func (tc timerClock) NewTimer(d time.Duration) ttl.ClockTimer {
	c := tc.c
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &clockTimer{c: c, ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, tm)
	tm.armLocked(d)
	return tm
}

func (tm *clockTimer) armLocked(d time.Duration) {
	read, ok := tm.c.read[goid()]
	if !ok {
		read = tm.c.now
	}
	tm.at, tm.active = read.Add(d), true
	if !tm.at.After(tm.c.now) {
		tm.fireLocked()
	}
}

func (tm *clockTimer) fireLocked() {
	tm.active = false
	select {
	case tm.ch <- tm.c.now:
	default:
	}
}

func (tm *clockTimer) C() <-chan time.Time { return tm.ch }

func (tm *clockTimer) Stop() bool {
	tm.c.mu.Lock()
	defer tm.c.mu.Unlock()
	was := tm.active
	tm.active = false
	drain(tm.ch) // no stale value after Stop (Go 1.23 timer semantics)
	return was
}

func (tm *clockTimer) Reset(d time.Duration) bool {
	tm.c.mu.Lock()
	defer tm.c.mu.Unlock()
	was := tm.active
	drain(tm.ch)
	tm.armLocked(d)
	return was
}

// goid is the calling goroutine's id, from the first line of its stack
// ("goroutine 42 [running]:").
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// OffsetClock is the wall clock plus an offset that only grows: time
// passes as it does (its timers fire on their own), and Advance moves it
// ahead at once, firing the timers it passes. Its Now is the broker's
// clock (broker.Options.Now) and it is itself a ttl.Clock for the
// broker's timers (broker.Options.TimerClock): for a test that runs in
// real time but must not wait for, say, every TTL to pass. Safe for
// concurrent use.
type OffsetClock struct {
	mu     sync.Mutex
	offset time.Duration
	timers []*offsetTimer
}

type offsetTimer struct {
	c      *OffsetClock
	ch     chan time.Time
	at     time.Time
	active bool
	gen    int         // arming count: a wall timer of an older arming does nothing
	wall   *time.Timer // fires the arming of generation gen
}

// NewOffsetClock returns an OffsetClock at the wall clock's time.
func NewOffsetClock() *OffsetClock { return &OffsetClock{} }

// Now returns the wall clock's time plus the offset.
func (c *OffsetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *OffsetClock) nowLocked() time.Time { return time.Now().Add(c.offset) }

// Advance moves the clock ahead by d and fires the timers that are due.
func (c *OffsetClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
	for _, tm := range c.timers {
		if tm.active {
			tm.scheduleLocked()
		}
	}
}

// NewTimer implements ttl.Clock.
func (c *OffsetClock) NewTimer(d time.Duration) ttl.ClockTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &offsetTimer{c: c, ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, tm)
	tm.at, tm.active = c.nowLocked().Add(d), true
	tm.scheduleLocked()
	return tm
}

// scheduleLocked fires tm if it is due, else sets a wall timer for when
// it will be.
func (tm *offsetTimer) scheduleLocked() {
	tm.gen++
	if tm.wall != nil {
		tm.wall.Stop()
		tm.wall = nil
	}
	left := tm.at.Sub(tm.c.nowLocked())
	if left <= 0 {
		tm.fireLocked()
		return
	}
	gen := tm.gen
	tm.wall = time.AfterFunc(left, func() {
		tm.c.mu.Lock()
		defer tm.c.mu.Unlock()
		if tm.active && tm.gen == gen {
			tm.fireLocked()
		}
	})
}

func (tm *offsetTimer) fireLocked() {
	tm.active = false
	select {
	case tm.ch <- tm.c.nowLocked():
	default:
	}
}

func (tm *offsetTimer) C() <-chan time.Time { return tm.ch }

func (tm *offsetTimer) Stop() bool {
	tm.c.mu.Lock()
	defer tm.c.mu.Unlock()
	was := tm.active
	tm.active = false
	tm.gen++
	if tm.wall != nil {
		tm.wall.Stop()
		tm.wall = nil
	}
	drain(tm.ch) // no stale value after Stop (Go 1.23 timer semantics)
	return was
}

func (tm *offsetTimer) Reset(d time.Duration) bool {
	tm.c.mu.Lock()
	defer tm.c.mu.Unlock()
	was := tm.active
	drain(tm.ch)
	tm.at, tm.active = tm.c.nowLocked().Add(d), true
	tm.scheduleLocked()
	return was
}

// drain takes a fired value left in a timer's channel, if any, so a
// stopped or reset timer delivers nothing stale.
func drain(ch chan time.Time) {
	select {
	case <-ch:
	default:
	}
}
