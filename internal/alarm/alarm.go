// Package alarm watches the broker's resources — the memory it holds and the
// free space of its data directory's filesystem — and reports when either
// crosses its limit, so the broker can block publishers (SPEC §7) until it
// is back under.
//
// # Memory
//
// The memory measured is what the process holds: its resident set less
// the Go heap memory that is free but not yet returned to the operating
// system (runtime/metrics /memory/classes/heap/free:bytes). RSS alone stays
// high after a large queue is deleted until the runtime scavenges, which
// kept publishers blocked for minutes with nothing held.
//
// The alarm is raised at the first check (every Interval, 1 s by default)
// that finds more held than MemoryLimit. When it is raised, and at every
// check while it stays raised, the monitor first collects garbage and
// returns free memory to the OS (Reclaim: debug.FreeOSMemory), because
// blocked publishers allocate nothing and so trigger no collection: what a
// deleted queue or an acked backlog held is counted free within one check.
// It clears at the first check that finds less held than MemoryLimit: there
// is no band below the limit, the hysteresis is the check interval and the
// reclaim before each check, so an alarm clears within about one Interval
// of usage falling below the watermark and a raised one is never held by
// garbage. SetGoMemoryLimit (called by cmd/brokerd) sets the Go runtime's
// soft memory limit below the watermark, so the collector works harder as
// the heap nears the watermark, before the alarm trips.
package alarm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Options configures a Monitor. A zero limit turns that alarm off.
type Options struct {
	// MemoryLimit is the memory held, in bytes, above which the memory
	// alarm is raised (see the package doc).
	MemoryLimit uint64
	// DiskPath is a path on the filesystem to watch; DiskFreeLimit the free
	// space, in bytes, below which the disk alarm is raised.
	DiskPath      string
	DiskFreeLimit uint64
	// Interval between checks (default 1s).
	Interval time.Duration
	// Held and DiskFree read the current values; defaults are HeldMemory
	// and FreeBytes. Reclaim collects garbage and returns free memory to
	// the OS before a memory check while the alarm is raised (default
	// debug.FreeOSMemory). Tests replace them.
	Held     func() (uint64, error)
	DiskFree func(path string) (uint64, error)
	Reclaim  func()
	// OnChange is called, from the monitor's goroutine, when an alarm
	// ("memory" or "disk") is raised or cleared.
	OnChange func(resource string, raised bool)
	Logger   *slog.Logger
}

// Monitor polls resources on its own goroutine.
type Monitor struct {
	opts Options
	// The limits in force: Options' until SetLimits changes them.
	memLimit, diskLimit atomic.Uint64
	kick                chan struct{} // SetLimits asks for a check now
	quit                chan struct{}
	done                chan struct{}
	once                sync.Once

	mem, disk bool // alarm state; monitor goroutine only
}

// Start starts a monitor. It checks once before returning, so an alarm
// that holds at start is raised before the broker serves anything.
func Start(o Options) *Monitor {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Held == nil {
		o.Held = HeldMemory
	}
	if o.Reclaim == nil {
		o.Reclaim = debug.FreeOSMemory
	}
	if o.DiskFree == nil {
		o.DiskFree = FreeBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	m := &Monitor{opts: o, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	m.memLimit.Store(o.MemoryLimit)
	m.diskLimit.Store(o.DiskFreeLimit)
	m.check()
	go m.run()
	return m
}

// SetLimits changes the memory and disk limits (Options.MemoryLimit and
// DiskFreeLimit; 0 turns that alarm off, clearing it if raised) while
// the monitor runs, and has them checked at once, on the monitor's
// goroutine. Safe for concurrent use.
func (m *Monitor) SetLimits(memory, diskFree uint64) {
	m.memLimit.Store(memory)
	m.diskLimit.Store(diskFree)
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Limits returns the memory and disk limits in force (Options' or
// SetLimits'; 0: that alarm is off). Safe for concurrent use.
func (m *Monitor) Limits() (memory, diskFree uint64) {
	return m.memLimit.Load(), m.diskLimit.Load()
}

// Close stops the monitor and waits for its goroutine. Idempotent.
func (m *Monitor) Close() {
	m.once.Do(func() { close(m.quit) })
	<-m.done
}

func (m *Monitor) run() {
	defer close(m.done)
	t := time.NewTicker(m.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-m.quit:
			return
		case <-t.C:
			m.check()
		case <-m.kick:
			m.check()
		}
	}
}

func (m *Monitor) check() {
	o := &m.opts
	memLimit, diskLimit := m.memLimit.Load(), m.diskLimit.Load()
	if memLimit == 0 {
		m.set("memory", &m.mem, false, "limit", 0)
	}
	if diskLimit == 0 {
		m.set("disk", &m.disk, false, "limit", 0)
	}
	if memLimit > 0 {
		if m.mem {
			o.Reclaim()
		}
		held, err := o.Held()
		if err == nil && !m.mem && held > memLimit {
			// Raising: count only what is live, and give back what is
			// not before publishers wait on it.
			o.Reclaim()
			held, err = o.Held()
		}
		if err != nil {
			o.Logger.Warn("cannot read memory use; memory alarm not evaluated", "err", err)
		} else {
			m.set("memory", &m.mem, held > memLimit, "held", held, "limit", memLimit)
		}
	}
	if diskLimit > 0 {
		if free, err := o.DiskFree(o.DiskPath); err != nil {
			o.Logger.Warn("cannot read free disk space; disk alarm not evaluated", "path", o.DiskPath, "err", err)
		} else {
			m.set("disk", &m.disk, free < diskLimit, "free", free, "limit", diskLimit)
		}
	}
}

func (m *Monitor) set(resource string, state *bool, raised bool, attrs ...any) {
	if *state == raised {
		return
	}
	*state = raised
	m.opts.Logger.Info("resource check", append([]any{"resource", resource, "alarm", raised}, attrs...)...)
	if m.opts.OnChange != nil {
		m.opts.OnChange(resource, raised)
	}
}

// HeldMemory returns the memory this process holds: its resident set
// less the Go heap memory that is free but still resident (see the
// package doc).
func HeldMemory() (uint64, error) {
	rss, err := ProcessRSS()
	if err != nil {
		return 0, err
	}
	s := []metrics.Sample{{Name: heapFreeMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return rss, nil
	}
	free := s[0].Value.Uint64()
	if free >= rss {
		return 0, nil
	}
	return rss - free, nil
}

// heapFreeMetric is the Go heap memory that is free and resident: eligible
// to be returned to the OS but not returned yet.
const heapFreeMetric = "/memory/classes/heap/free:bytes"

// SetGoMemoryLimit sets the Go runtime's soft memory limit to 90 % of the
// memory watermark (so the collector works harder as the heap nears it,
// before the alarm trips) unless GOMEMLIMIT set one, and returns the limit
// in force. A watermark of 0 changes nothing.
func SetGoMemoryLimit(watermark uint64) int64 {
	if watermark == 0 || os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1)
	}
	limit := watermark / 10 * 9
	if limit > math.MaxInt64 {
		limit = math.MaxInt64
	}
	debug.SetMemoryLimit(int64(limit))
	return int64(limit)
}

// statm is /proc/self/statm, opened once and read from offset 0 at each
// check: a broker out of file descriptors (a flood of connections) still
// evaluates its memory alarm.
var statm struct {
	mu sync.Mutex
	f  *os.File
}

// ProcessRSS returns this process's resident set size from
// /proc/self/statm.
func ProcessRSS() (uint64, error) {
	statm.mu.Lock()
	defer statm.mu.Unlock()
	if statm.f == nil {
		f, err := os.Open("/proc/self/statm")
		if err != nil {
			return 0, fmt.Errorf("open statm: %w", err)
		}
		statm.f = f
	}
	var buf [256]byte
	n, err := statm.f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("read statm: %w", err)
	}
	f := strings.Fields(string(buf[:n]))
	if len(f) < 2 {
		return 0, errors.New("alarm: malformed /proc/self/statm")
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse statm: %w", err)
	}
	return pages * uint64(os.Getpagesize()), nil
}

// FreeBytes returns the space available to unprivileged users on the
// filesystem holding path.
func FreeBytes(path string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// TotalMemory returns the machine's physical memory from /proc/meminfo
// (for a watermark given as a fraction).
func TotalMemory() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("open meminfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kib, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse MemTotal: %w", err)
			}
			return kib * 1024, nil
		}
	}
	return 0, errors.New("alarm: no MemTotal in /proc/meminfo")
}
