package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.sock")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	if err := Notify("READY=1"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	l.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := l.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:n]); got != "READY=1" {
		t.Fatalf("received %q, want READY=1", got)
	}
}

func TestNotifyWithoutSocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if err := Notify("READY=1"); err != nil {
		t.Fatalf("Notify without NOTIFY_SOCKET: %v", err)
	}
}

func TestReloading(t *testing.T) {
	m := Reloading()
	rest, ok := strings.CutPrefix(m, "RELOADING=1\nMONOTONIC_USEC=")
	if !ok {
		t.Fatalf("Reloading() = %q", m)
	}
	if usec, err := strconv.ParseInt(rest, 10, 64); err != nil || usec <= 0 {
		t.Fatalf("MONOTONIC_USEC=%q", rest)
	}
}

func TestWatchdogInterval(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		usec, pid string
		want      time.Duration
		err       bool
	}{
		{"", "", 0, false},
		{"20000000", "", 20 * time.Second, false},
		{"20000000", pid, 20 * time.Second, false},
		{"20000000", "1", 0, false}, // another process's watchdog
		{"x", "", 0, true},
		{"0", "", 0, true},
	} {
		t.Setenv("WATCHDOG_USEC", tc.usec)
		t.Setenv("WATCHDOG_PID", tc.pid)
		got, err := WatchdogInterval()
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: %v, %v; want %v (error %t)", tc.usec, tc.pid, got, err, tc.want, tc.err)
		}
	}
}
