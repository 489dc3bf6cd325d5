package auth_test

import (
	"net"
	"testing"

	"github.com/brokerd/brokerd/broker/auth"
)

// Loopback users may log in over loopback TCP and Unix sockets only; a
// source is named by its failed-login budget's prefix.
func TestLoopbackAndSource(t *testing.T) {
	for _, tc := range []struct {
		addr     net.Addr
		loopback bool
		source   string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5672}, true, "127.0.0.1/32"},
		{&net.TCPAddr{IP: net.IPv4(127, 1, 2, 3), Port: 5672}, true, "127.1.2.3/32"},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 5672}, true, "::/64"},
		{&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 40000}, false, "10.0.0.1/32"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 1}, false, "2001:db8::/64"},
		{&net.UnixAddr{Name: "/run/brokerd.sock", Net: "unix"}, true, "/run/brokerd.sock"},
		{&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, false, "127.0.0.1/32"},
		{nil, false, "an unknown address"},
	} {
		if got := auth.IsLoopback(tc.addr); got != tc.loopback {
			t.Errorf("IsLoopback(%v) = %v, want %v", tc.addr, got, tc.loopback)
		}
		if got := auth.SourceName(tc.addr); got != tc.source {
			t.Errorf("SourceName(%v) = %q, want %q", tc.addr, got, tc.source)
		}
	}
}
