// Tests of the harness's fake clocks: timers fire as the clock passes them.

package brokertest_test

import (
	"testing"
	"time"

	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/ttl"
)

func TestClocksFireTimersOnAdvance(t *testing.T) {
	manual := brokertest.NewClock()
	for _, tc := range []struct {
		name    string
		clock   ttl.Clock
		advance func(time.Duration)
	}{
		{"Clock", manual.Timers(), manual.Advance},
		{"OffsetClock", brokertest.NewOffsetClock(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			advance := tc.advance
			if advance == nil {
				advance = tc.clock.(*brokertest.OffsetClock).Advance
			}
			fired := func(tm ttl.ClockTimer) bool {
				select {
				case <-tm.C():
					return true
				default:
					return false
				}
			}
			start := tc.clock.Now()
			tm := tc.clock.NewTimer(time.Hour)
			stopped := tc.clock.NewTimer(time.Hour)
			reset := tc.clock.NewTimer(time.Hour)
			advance(30 * time.Minute)
			if fired(tm) {
				t.Fatal("fired half-way")
			}
			if !stopped.Stop() {
				t.Fatal("Stop of an active timer returned false")
			}
			if !reset.Reset(2 * time.Hour) {
				t.Fatal("Reset of an active timer returned false")
			}
			advance(31 * time.Minute)
			if !fired(tm) {
				t.Fatal("not fired once passed")
			}
			if fired(stopped) || fired(reset) {
				t.Fatal("a stopped or reset timer fired at its old deadline")
			}
			if got := tc.clock.Now().Sub(start); got < 61*time.Minute || got > 62*time.Minute {
				t.Fatalf("clock moved %v, want 61 min", got)
			}
			advance(2 * time.Hour)
			if !fired(reset) || fired(stopped) {
				t.Fatal("the reset timer did not fire at its new deadline, or the stopped one fired")
			}
		})
	}
}

// An OffsetClock's timers fire as the wall clock passes them too.
func TestOffsetClockFiresInRealTime(t *testing.T) {
	c := brokertest.NewOffsetClock()
	c.Advance(time.Hour)
	tm := c.NewTimer(time.Millisecond)
	select {
	case <-tm.C():
	case <-time.After(brokertest.Wait):
		t.Fatal("a 1 ms timer did not fire")
	}
}
