package alarm

import (
	"errors"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
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
		Held:     func() (uint64, error) { return rss.Load(), nil },
		Reclaim:  func() {},
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
	m := Start(Options{MemoryLimit: 1, Interval: time.Hour, Held: func() (uint64, error) { return 2, nil }, Reclaim: func() {}, OnChange: ev.on})
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
	m := Start(Options{MemoryLimit: 1, Interval: time.Millisecond, Reclaim: func() {}, Held: func() (uint64, error) {
		calls.Add(1)
		return 0, errors.New("boom")
	}, OnChange: func(string, bool) { t.Error("OnChange called although the value could not be read") }})
	for calls.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	m.Close()
	m.Close() // idempotent
}

// The monitor reclaims (collects garbage, returns free memory) before it
// raises the alarm and before every check while it is raised: garbage
// alone never raises it, and a raised alarm clears once what was held is
// garbage, although nothing allocates (publishers are blocked) to make the
// runtime collect it.
func TestReclaimBeforeRaisingAndWhileRaised(t *testing.T) {
	var live, garbage atomic.Uint64 // what Held counts: live + garbage
	reclaimed := make(chan struct{}, 1)
	ev := &events{ch: make(chan struct{}, 10)}
	m := Start(Options{
		MemoryLimit: 100, Interval: time.Millisecond,
		Held: func() (uint64, error) { return live.Load() + garbage.Load(), nil },
		Reclaim: func() {
			garbage.Store(0)
			select {
			case reclaimed <- struct{}{}:
			default:
			}
		},
		OnChange: ev.on,
	})
	defer m.Close()
	select {
	case <-reclaimed:
		t.Fatal("reclaimed under the limit")
	default:
	}
	// Over the limit with garbage only: reclaimed, not raised.
	live.Store(60)
	garbage.Store(60)
	select {
	case <-reclaimed:
	case <-time.After(5 * time.Second):
		t.Fatal("no reclaim with 120 held over a limit of 100")
	}
	// Over the limit with live memory: raised.
	live.Store(150)
	ev.wait(t, "memory+")
	// The queue is deleted: what it held is garbage nobody collects but
	// the monitor.
	live.Store(40)
	garbage.Store(110)
	ev.wait(t, "memory+", "memory-")
}

// HeldMemory counts a live Go buffer and stops counting it once it is
// collected, though the runtime keeps the pages resident; a monitor with
// the defaults raises the alarm for a buffer and clears it within seconds
// of the buffer being dropped (it stayed raised for minutes when the
// alarm read RSS alone and nothing collected).
func TestHeldMemoryFollowsTheGoHeap(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory stays resident after the heap is freed; run without -race")
	}
	const size = 256 << 20
	runtime.GC()
	base, err := HeldMemory()
	if err != nil {
		t.Fatal(err)
	}
	ev := &events{ch: make(chan struct{}, 10)}
	m := Start(Options{MemoryLimit: base + size/2, Interval: 10 * time.Millisecond, OnChange: ev.on})
	defer m.Close()
	buf := make([]byte, size)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1 // resident
	}
	if held, _ := HeldMemory(); held < base+size*3/4 {
		t.Fatalf("held %d with a %d-byte buffer live, base %d", held, size, base)
	}
	ev.wait(t, "memory+")
	runtime.KeepAlive(buf)
	buf = nil
	ev.wait(t, "memory+", "memory-")
	if held, _ := HeldMemory(); held > base+size/4 {
		t.Fatalf("held %d after the buffer was collected, base %d", held, base)
	}
}

func TestSetGoMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	t.Setenv("GOMEMLIMIT", "")
	if got := SetGoMemoryLimit(1000 << 20); got != 900<<20 {
		t.Fatalf("limit %d for a 1000 MiB watermark, want 900 MiB", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 900<<20 {
		t.Fatalf("runtime limit %d, want 900 MiB", got)
	}
}

func TestDefaultsReadThisMachine(t *testing.T) {
	held, err := HeldMemory()
	if err != nil || held == 0 {
		t.Fatalf("HeldMemory = %d, %v", held, err)
	}
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

// Out of file descriptors (a flood of idle connections), the memory is
// still read: the statm file stays open.
func TestProcessRSSWithoutFreeDescriptors(t *testing.T) {
	if _, err := ProcessRSS(); err != nil {
		t.Fatal(err)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("cannot lower RLIMIT_NOFILE: %v", err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	var held []*os.File
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("open: %v, want EMFILE", err)
			}
			break
		}
		held = append(held, f)
	}
	if rss, err := ProcessRSS(); err != nil || rss == 0 {
		t.Fatalf("ProcessRSS with no descriptor free = %d, %v", rss, err)
	}
}

// SetLimits applies new limits at once (no tick needed: the interval is
// an hour), and a limit set to 0 clears its raised alarm.
func TestSetLimits(t *testing.T) {
	ev := &events{ch: make(chan struct{}, 10)}
	m := Start(Options{
		MemoryLimit: 100, DiskPath: "/data", DiskFreeLimit: 10, Interval: time.Hour,
		Held:     func() (uint64, error) { return 50, nil },
		Reclaim:  func() {},
		DiskFree: func(string) (uint64, error) { return 20, nil },
		OnChange: ev.on,
	})
	defer m.Close()
	m.SetLimits(40, 10)
	ev.wait(t, "memory+")
	m.SetLimits(40, 30)
	ev.wait(t, "memory+", "disk+")
	m.SetLimits(0, 30)
	ev.wait(t, "memory+", "disk+", "memory-")
	m.SetLimits(0, 0)
	ev.wait(t, "memory+", "disk+", "memory-", "disk-")
}
