package mgmt

import (
	"net"
	"sync"
	"syscall"

	"github.com/brokerd/brokerd/internal/ratelog"
)

// DefaultMaxConnections is the bound on open management connections when
// Options.MaxConnections is 0: an eighth of the process's descriptor limit
// (RLIMIT_NOFILE, as raised by the Go runtime at start), at least 32 and
// at most 1024. A share of the limit rather than a fixed number, so that
// at a low limit (256) the API cannot take the descriptors the store and
// the AMQP listener need; 1024 is more than any number of people and
// scripts managing one broker keep open.
func DefaultMaxConnections() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == 0 {
		return 256
	}
	return int(min(max(lim.Cur/8, 32), 1024))
}

// connLimit bounds the connections open at once over every listener of a
// Server: Accept waits while the bound is reached, leaving new
// connections in the kernel's accept queue (where they cost the process
// no descriptor) until one closes, as Cowboy's max_connections does.
// Slots are taken in Accept and given back by the server's ConnState
// hook when a connection closes (or is hijacked).
type connLimit struct {
	slots chan struct{}
	log   *ratelog.Limiter // the bound reached
}

func (c *connLimit) release() { <-c.slots }

// limitListener is one listener under a connLimit.
type limitListener struct {
	net.Listener
	lim       *connLimit
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.lim.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	default:
		l.lim.log.Event("max_connections", cap(l.lim.slots), "listener", l.Addr().String())
		select {
		case l.lim.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		l.lim.release()
		return nil, err
	}
	return c, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}
