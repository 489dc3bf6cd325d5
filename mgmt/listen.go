package mgmt

import (
	"net"
	"sync"

	"github.com/brokerd/brokerd/internal/fdbudget"
	"github.com/brokerd/brokerd/internal/ratelog"
)

// DefaultMaxConnections is the bound on open management connections when
// Options.MaxConnections is 0: the HTTP share of the process's descriptor
// limit (internal/fdbudget: a sixteenth of RLIMIT_NOFILE, at least 8 and
// at most 1024), so that at a low limit the API cannot take the
// descriptors the store and the AMQP listener need; 1024 is more than any
// number of people and scripts managing one broker keep open.
func DefaultMaxConnections() int {
	limit, err := fdbudget.Limit()
	if err != nil {
		return 256
	}
	return fdbudget.Split(limit).HTTP
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
