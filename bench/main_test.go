package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The tracker counts each (producer, seq) once, a repeat as a duplicate
// and a producer or seq outside the run as a stray.
func TestTrackerExactlyOnce(t *testing.T) {
	tr := newTracker(2)
	for _, c := range []struct {
		producer int
		seq      uint64
		isNew    bool
	}{
		{0, 0, true}, {0, 1, true}, {1, 0, true}, {0, 0, false}, {0, 1000, true},
		{0, 63, true}, {0, 64, true}, {0, 64, false}, {1, 1000, true}, {2, 0, false},
		{-1, 0, false}, {0, maxTrackedSeq, false},
	} {
		if got := tr.record(c.producer, c.seq); got != c.isNew {
			t.Errorf("record(%d, %d) = %t, want %t", c.producer, c.seq, got, c.isNew)
		}
	}
	if rcv, dup := tr.counts(); rcv != 7 || dup != 5 {
		t.Errorf("received %d, duplicated %d; want 7, 5", rcv, dup)
	}
}
