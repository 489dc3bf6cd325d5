// Package pipelisten is a net.Listener whose connections are in-memory
// pipes (net.Pipe) opened by Dial in the same process: how brokerd serves
// its own AMQP clients (a shovel's side on this broker) through its AMQP
// server code without a socket anyone else can reach.
package pipelisten

import (
	"context"
	"net"
	"sync"
)

// Listener hands each Dial's server end to Accept. Safe for concurrent
// use; Close is idempotent.
type Listener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

// New returns an open Listener.
func New() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Dial opens a connection: it returns the client's end once Accept has
// taken the server's, or an error once ctx ends or the listener is
// closed (net.ErrClosed).
func (l *Listener) Dial(ctx context.Context) (net.Conn, error) {
	server, client := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
	case <-ctx.Done():
		server.Close()
		client.Close()
		return nil, ctx.Err()
	}
	server.Close()
	client.Close()
	return nil, net.ErrClosed
}

// Accept waits for a Dial; after Close it returns net.ErrClosed.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and Dial; connections already made stay open.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

// Addr is a pipe's address.
func (l *Listener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
