// Package alarm watches the broker's resources — its resident memory and the
// free space of its data directory's filesystem — and reports when either
// crosses its limit, so the broker can block publishers (SPEC §7) until it
// is back under.
package alarm

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configures a Monitor. A zero limit turns that alarm off.
type Options struct {
	// MemoryLimit is the RSS, in bytes, above which the memory alarm is
	// raised.
	MemoryLimit uint64
	// DiskPath is a path on the filesystem to watch; DiskFreeLimit the free
	// space, in bytes, below which the disk alarm is raised.
	DiskPath      string
	DiskFreeLimit uint64
	// Interval between checks (default 1s).
	Interval time.Duration
	// RSS and DiskFree read the current values; defaults read
	// /proc/self/statm and statfs(2). Tests replace them.
	RSS      func() (uint64, error)
	DiskFree func(path string) (uint64, error)
	// OnChange is called, from the monitor's goroutine, when an alarm
	// ("memory" or "disk") is raised or cleared.
	OnChange func(resource string, raised bool)
	Logger   *slog.Logger
}

// Monitor polls resources on its own goroutine.
type Monitor struct {
	opts Options
	quit chan struct{}
	done chan struct{}
	once sync.Once

	mem, disk bool // alarm state; monitor goroutine only
}

// Start starts a monitor. It checks once before returning, so an alarm
// that holds at start is raised before the broker serves anything.
func Start(o Options) *Monitor {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.RSS == nil {
		o.RSS = ProcessRSS
	}
	if o.DiskFree == nil {
		o.DiskFree = FreeBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	m := &Monitor{opts: o, quit: make(chan struct{}), done: make(chan struct{})}
	m.check()
	go m.run()
	return m
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
		}
	}
}

func (m *Monitor) check() {
	o := &m.opts
	if o.MemoryLimit > 0 {
		if rss, err := o.RSS(); err != nil {
			o.Logger.Warn("cannot read memory use; memory alarm not evaluated", "err", err)
		} else {
			m.set("memory", &m.mem, rss > o.MemoryLimit, "rss", rss, "limit", o.MemoryLimit)
		}
	}
	if o.DiskFreeLimit > 0 {
		if free, err := o.DiskFree(o.DiskPath); err != nil {
			o.Logger.Warn("cannot read free disk space; disk alarm not evaluated", "path", o.DiskPath, "err", err)
		} else {
			m.set("disk", &m.disk, free < o.DiskFreeLimit, "free", free, "limit", o.DiskFreeLimit)
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

// ProcessRSS returns this process's resident set size from
// /proc/self/statm.
func ProcessRSS() (uint64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, fmt.Errorf("read statm: %w", err)
	}
	f := strings.Fields(string(b))
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
