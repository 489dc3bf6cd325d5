package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// rssInterval is how often rssSampler reads the broker's RSS.
const rssInterval = 100 * time.Millisecond

// rssSampler samples a process's resident set size (VmRSS in
// /proc/PID/status) every rssInterval on its own goroutine and keeps the
// peak. The broker must run on the same machine as bench. Its methods are
// safe for concurrent use.
type rssSampler struct {
	pid  int
	quit chan struct{}
	done chan struct{}

	mu   sync.Mutex
	peak uint64 // bytes
	err  error  // the first failed read
}

// startRSS reads pid's RSS once (so a wrong pid fails the run at once)
// and starts sampling it.
func startRSS(pid int) (*rssSampler, error) {
	first, err := readRSS(pid)
	if err != nil {
		return nil, err
	}
	s := &rssSampler{pid: pid, quit: make(chan struct{}), done: make(chan struct{}), peak: first}
	go s.loop()
	return s, nil
}

func (s *rssSampler) loop() {
	defer close(s.done)
	t := time.NewTicker(rssInterval)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
			s.sample()
		}
	}
}

// sample reads the RSS once, keeps the peak and returns the value.
func (s *rssSampler) sample() (uint64, error) {
	v, err := readRSS(s.pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return 0, err
	}
	s.peak = max(s.peak, v)
	return v, nil
}

// nowMiB samples the RSS once (keeping the peak) and returns it in MiB.
func (s *rssSampler) nowMiB() (float64, error) {
	v, err := s.sample()
	return float64(v) / (1 << 20), err
}

// stop ends the sampling and returns the peak and a last sample, in MiB.
// It fails if any read failed (the broker exited, say): a peak with gaps
// is not one.
func (s *rssSampler) stop() (peakMiB, endMiB float64, err error) {
	close(s.quit)
	<-s.done
	end, err := s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, 0, s.err
	}
	const mib = 1 << 20
	return float64(s.peak) / mib, float64(end) / mib, nil
}

// readRSS returns pid's VmRSS in bytes.
func readRSS(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("broker rss: %w", err)
	}
	return parseVmRSS(b)
}

// parseVmRSS finds "VmRSS:  1234 kB" in a /proc/PID/status text.
func parseVmRSS(status []byte) (uint64, error) {
	for line := range bytes.Lines(status) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("broker rss: unexpected line %q", bytes.TrimSpace(line))
		}
		kb, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("broker rss: %w", err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("broker rss: no VmRSS line (a kernel thread or a zombie?)")
}
