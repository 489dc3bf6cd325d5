package histogram

import (
	"slices"
	"sync"
	"testing"
)

func TestSnapshot(t *testing.T) {
	h := New(1, 10, 100)
	for _, v := range []float64{0.5, 1, 2, 10, 50, 1000} {
		h.Observe(v)
	}
	s := h.Snapshot()
	if want := []uint64{2, 4, 5}; !slices.Equal(s.Cumulative, want) {
		t.Errorf("cumulative %v, want %v", s.Cumulative, want)
	}
	if s.Count != 6 || s.Sum != 1063.5 {
		t.Errorf("count %d sum %v, want 6 and 1063.5", s.Count, s.Sum)
	}
	if !slices.Equal(s.Bounds, []float64{1, 10, 100}) {
		t.Errorf("bounds %v", s.Bounds)
	}
}

// TestConcurrentObserve checks that no observation is lost when many
// goroutines observe at once (run with -race).
func TestConcurrentObserve(t *testing.T) {
	h := New(1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				h.Observe(2)
			}
		})
	}
	wg.Wait()
	if s := h.Snapshot(); s.Count != 8000 || s.Sum != 16000 || s.Cumulative[0] != 0 {
		t.Errorf("after 8000 observations of 2: %+v", s)
	}
}
