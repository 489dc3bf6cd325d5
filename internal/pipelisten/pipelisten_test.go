package pipelisten

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

func TestDialAccept(t *testing.T) {
	l := New()
	done := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c) // echo until the client closes
		done <- err
	}()
	c, err := l.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo %q %v", buf, err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	l.Close()
	l.Close() // idempotent
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	if _, err := l.Dial(context.Background()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Dial after Close: %v", err)
	}
}

// A Dial nobody accepts ends with its context.
func TestDialGivesUp(t *testing.T) {
	l := New()
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond) // time is the point: no Accept comes
	defer cancel()
	if _, err := l.Dial(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial without Accept: %v", err)
	}
}
