package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log destination safe for the watchdog's goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The watchdog notifies only while its check passes: a check that does
// not return within the period stops WATCHDOG=1 until it does.
func TestWatchdogStopsWhileTheCheckIsStuck(t *testing.T) {
	sock := newNotifySocket(t)
	t.Setenv("NOTIFY_SOCKET", sock.path)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	checks := make(chan chan error, 100) // each check waits for its answer here
	check := func() error {
		c := make(chan error)
		checks <- c
		return <-c
	}
	w := startWatchdog(20*time.Millisecond, check, log)
	defer w.stop()
	answer := func() {
		t.Helper()
		select {
		case c := <-checks:
			c <- nil
		case <-time.After(10 * time.Second):
			t.Fatal("no check")
		}
	}
	answer()
	if other := sock.awaitWatchdog(); len(other) > 0 {
		t.Fatalf("unexpected %q", other)
	}
	// The next check hangs.
	var stuck chan error
	select {
	case stuck = <-checks:
	case <-time.After(10 * time.Second):
		t.Fatal("no second check")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "did not finish within the interval") {
		if time.Now().After(deadline) {
			t.Fatalf("no log line for the stuck check:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond) // polls the log
	}
	// Two more periods: still nothing sent, and no second check started.
	time.Sleep(40 * time.Millisecond) // time is the point: nothing may happen
	select {
	case m := <-sock.msgs:
		t.Fatalf("%q sent while the check is stuck", m)
	case c := <-checks:
		c <- nil
		t.Fatal("a second check started while one is stuck")
	default:
	}
	stuck <- nil
	if other := sock.awaitWatchdog(); len(other) > 0 {
		t.Fatalf("unexpected %q", other)
	}
	go func() { // later checks pass, until stop
		for c := range checks {
			c <- nil
		}
	}()
}
