// Package sdnotify implements systemd's readiness protocol (sd_notify):
// a datagram such as "READY=1" sent to the unix socket named by
// $NOTIFY_SOCKET. Without that variable (not run by systemd with
// Type=notify) every call is a no-op.
package sdnotify

import (
	"fmt"
	"net"
	"os"
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
