package alarm

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// events records OnChange calls; wait takes the whole expected history.
type events struct {
	mu   sync.Mutex
	got  []string
	ch   chan struct{}
	seen int // signals consumed by wait
}

func (e *events) on(resource string, raised bool) {
	e.mu.Lock()
	s := resource + "-"
	if raised {
		s = resource + "+"
	}
	e.got = append(e.got, s)
	e.mu.Unlock()
	e.ch <- struct{}{}
}

func (e *events) wait(t *testing.T, want ...string) {
	t.Helper()
	for ; e.seen < len(want); e.seen++ {
		select {
		case <-e.ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("timed out; events so far %v, want %v", e.got, want)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.got) != len(want) {
		t.Fatalf("events %v, want %v", e.got, want)
	}
	for i := range want {
		if e.got[i] != want[i] {
			t.Fatalf("events %v, want %v", e.got, want)
		}
	}
}

func TestRaiseAndClear(t *testing.T) {
	var rss, free atomic.Uint64
	rss.Store(50)
	free.Store(1000)
	ev := &events{ch: make(chan struct{}, 10)}
	m := Start(Options{
		MemoryLimit: 100, DiskPath: "/data", DiskFreeLimit: 500, Interval: time.Millisecond,
		RSS:      func() (uint64, error) { return rss.Load(), nil },
		DiskFree: func(p string) (uint64, error) { return free.Load(), nil },
		OnChange: ev.on,
	})
	defer m.Close()
	rss.Store(150)
	ev.wait(t, "memory+")
	free.Store(100)
	ev.wait(t, "memory+", "disk+")
	rss.Store(99)
	free.Store(501)
	// Both clear; the memory check runs first within one tick.
	ev.wait(t, "memory+", "disk+", "memory-", "disk-")
}

func TestAlarmAtStart(t *testing.T) {
	ev := &events{ch: make(chan struct{}, 10)}
	m := Start(Options{MemoryLimit: 1, Interval: time.Hour, RSS: func() (uint64, error) { return 2, nil }, OnChange: ev.on})
	defer m.Close()
	// Raised synchronously by Start, before any tick.
	ev.mu.Lock()
	n := len(ev.got)
	ev.mu.Unlock()
	if n != 1 {
		t.Fatalf("alarm not raised at start: %v", ev.got)
	}
}

func TestReadErrorsKeepState(t *testing.T) {
	calls := atomic.Int32{}
	m := Start(Options{MemoryLimit: 1, Interval: time.Millisecond, RSS: func() (uint64, error) {
		calls.Add(1)
		return 0, errors.New("boom")
	}, OnChange: func(string, bool) { t.Error("OnChange called although the value could not be read") }})
	for calls.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	m.Close()
	m.Close() // idempotent
}

func TestDefaultsReadThisMachine(t *testing.T) {
	rss, err := ProcessRSS()
	if err != nil || rss == 0 {
		t.Fatalf("ProcessRSS = %d, %v", rss, err)
	}
	total, err := TotalMemory()
	if err != nil || total < rss {
		t.Fatalf("TotalMemory = %d, %v (rss %d)", total, err, rss)
	}
	free, err := FreeBytes(t.TempDir())
	if err != nil || free == 0 {
		t.Fatalf("FreeBytes = %d, %v", free, err)
	}
	if _, err := FreeBytes("/nonexistent/path"); err == nil {
		t.Fatal("FreeBytes of a missing path succeeded")
	}
}
