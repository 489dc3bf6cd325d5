package amqp

import (
	"context"
	"errors"
	"net"
	"testing"
)

// Serve called after Shutdown (a server stopped before its serving
// goroutine ran) closes its listener: the address can be listened on
// again at once, as a restart on the same port does.
func TestServeAfterShutdownClosesListener(t *testing.T) {
	s := NewServer(ServerConfig{})
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(ln); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve after Shutdown: %v, want ErrServerClosed", err)
	}
	again, err := net.Listen("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("listen again on %s: %v", ln.Addr(), err)
	}
	again.Close()
}
