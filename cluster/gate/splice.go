package gate

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Splice copies a's bytes to b and b's to a until both directions have
// ended, then closes both, and returns the first real error of either
// direction (not io.EOF, not net.ErrClosed). A direction that ends
// cleanly (its source read io.EOF) half-closes its destination:
// CloseWrite where the connection has it (TCP, TLS, transport streams),
// else Close (which ends the other direction too). A direction that
// fails closes both connections at once, so that the other direction
// does not wait on a peer that will never be answered. Splice owns a and
// b; it returns when both are closed.
func Splice(a, b net.Conn) error {
	var (
		once  sync.Once
		mu    sync.Mutex
		first error // the first failure of either direction
	)
	closeBoth := func() {
		once.Do(func() {
			a.Close()
			b.Close()
		})
	}
	pipe := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if err == nil {
			halfClose(dst)
			return
		}
		if isFailure(err) {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
		closeBoth()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(b, a)
	}()
	pipe(a, b)
	<-done
	closeBoth()
	return first
}

// halfClose ends c's outgoing bytes: CloseWrite if c has it and it works
// (a TLS connection refuses before its handshake), else Close.
func halfClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	c.Close()
}

// isFailure reports whether err is a failure rather than an end: not
// io.EOF, nor the use of a connection Splice (or its owner) closed
// (net.ErrClosed; io.ErrClosedPipe from a net.Pipe).
func isFailure(err error) bool {
	return err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrClosedPipe)
}
