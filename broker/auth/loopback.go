package auth

import (
	"net"

	"github.com/brokerd/brokerd/internal/loginlimit"
)

// IsLoopback reports whether addr is a loopback address (a Unix socket
// counts; nil does not): the only addresses the loopback users
// (broker.Options.LoopbackUsers) may log in from.
func IsLoopback(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	return false
}

// SourceName names the source whose failed-login budget remote spends
// (loginlimit.Source), for log and error texts.
func SourceName(remote net.Addr) string {
	if p := loginlimit.Source(remote); p.IsValid() {
		return p.String()
	}
	if remote == nil {
		return "an unknown address"
	}
	return remote.String()
}
