// Package sdnotify implements systemd's readiness protocol (sd_notify):
// a datagram such as "READY=1" sent to the unix socket named by
// $NOTIFY_SOCKET. Without that variable (not run by systemd with
// Type=notify) every call is a no-op.
//
// The functions are safe for concurrent use: each sends one datagram on
// a socket of its own.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Notify sends state (e.g. "READY=1", "STOPPING=1") to systemd. It returns
// nil without doing anything when NOTIFY_SOCKET is unset.
func Notify(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:] // abstract socket namespace
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("dial notify socket: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("write to notify socket: %w", err)
	}
	return nil
}

// Reloading is the message that starts a reload: "RELOADING=1" with
// MONOTONIC_USEC, the CLOCK_MONOTONIC time systemd 253+ requires of a
// Type=notify-reload service (older systemd ignores the field). Send
// "READY=1" when the reload is over.
func Reloading() string {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return "RELOADING=1"
	}
	usec := ts.Nano() / int64(time.Microsecond)
	return "RELOADING=1\nMONOTONIC_USEC=" + strconv.FormatInt(usec, 10)
}

// WatchdogInterval returns the watchdog timeout systemd set for this
// process ($WATCHDOG_USEC, when $WATCHDOG_PID is unset or names this
// process), or 0 when there is none. Send "WATCHDOG=1" at half of it.
func WatchdogInterval() (time.Duration, error) {
	s := os.Getenv("WATCHDOG_USEC")
	if s == "" {
		return 0, nil
	}
	if p := os.Getenv("WATCHDOG_PID"); p != "" {
		pid, err := strconv.Atoi(p)
		if err != nil {
			return 0, fmt.Errorf("parse WATCHDOG_PID %q: %w", p, err)
		}
		if pid != os.Getpid() {
			return 0, nil
		}
	}
	usec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || usec <= 0 {
		return 0, fmt.Errorf("parse WATCHDOG_USEC %q: want a positive number of microseconds", s)
	}
	return time.Duration(usec) * time.Microsecond, nil
}
