package loginlimit

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a time the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func addr(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

// fail makes a failed login attempt from a and reports whether its
// password was checked (the source was within its budget).
func fail(l *Limiter, a net.Addr) bool {
	_, checked := l.Check(a, func() bool { return false })
	return checked
}

// succeed makes a login attempt from a with the right password and
// reports whether it got in.
func succeed(l *Limiter, a net.Addr) bool {
	ok, _ := l.Check(a, func() bool { return true })
	return ok
}

// A source gets Burst failed logins at once however many goroutines try
// them, then one per Interval; successful logins cost nothing; other
// sources are not affected.
func TestBurstThenRate(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(Options{Burst: 5, Interval: time.Second, Now: c.now})
	a, b := addr("192.0.2.1:1000"), addr("192.0.2.2:1000")
	var taken atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if fail(l, a) {
					taken.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := taken.Load(); n != 5 {
		t.Fatalf("%d of 320 parallel attempts checked, want the burst of 5", n)
	}
	if !succeed(l, b) {
		t.Fatal("another source refused")
	}
	c.add(999 * time.Millisecond)
	if fail(l, a) {
		t.Fatal("an attempt 999ms later was allowed")
	}
	c.add(time.Millisecond)
	if !fail(l, a) {
		t.Fatal("no attempt allowed after one interval")
	}
	if fail(l, a) {
		t.Fatal("two attempts allowed after one interval")
	}
	// A good login costs nothing: a client that logs in successfully is
	// never held back.
	c.add(time.Second)
	for range 100 {
		if !succeed(l, a) {
			t.Fatal("a successful client ran out of tokens")
		}
	}
	// Refilled completely, a source is forgotten.
	c.add(10 * time.Second)
	succeed(l, a)
	if n := l.Sources(); n != 0 {
		t.Fatalf("%d sources remembered after they refilled", n)
	}
}

// The ports of a source, and the addresses of one IPv6 /64, share a budget.
func TestSourceKeys(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(Options{Burst: 2, Now: c.now})
	for _, a := range []string{"192.0.2.1:1", "192.0.2.1:2"} {
		if !fail(l, addr(a)) {
			t.Fatalf("%s refused within the burst", a)
		}
	}
	if fail(l, addr("192.0.2.1:3")) {
		t.Fatal("a third port of the source got past the burst")
	}
	if !fail(l, addr("[2001:db8::1]:1")) || !fail(l, addr("[2001:db8::ffff]:1")) {
		t.Fatal("IPv6 refused within the burst")
	}
	if fail(l, addr("[2001:db8::1:2:3:4]:9")) {
		t.Fatal("another address of the /64 got past its burst")
	}
	if !fail(l, addr("[2001:db8:0:1::1]:1")) {
		t.Fatal("another /64 refused")
	}
	if !fail(l, addr("[::ffff:192.0.2.9]:1")) {
		t.Fatal("IPv4-mapped refused")
	}
	if fail(l, addr("[::ffff:192.0.2.1]:1")) {
		t.Fatal("192.0.2.1 as IPv4-mapped IPv6 got past its burst")
	}
}

// The table is bounded: with it full of sources short of tokens, new ones
// share the overflow bucket; a sweep forgets those that refilled.
func TestBoundedTable(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(Options{Burst: 1, Interval: time.Second, MaxSources: 4, Now: c.now})
	for i := range 4 {
		fail(l, addr(fmt.Sprintf("192.0.2.%d:1", i+1)))
	}
	if n := l.Sources(); n != 4 {
		t.Fatalf("%d sources", n)
	}
	// Full: two new sources share one bucket of one token.
	if !fail(l, addr("198.51.100.1:1")) {
		t.Fatal("first new source refused")
	}
	if fail(l, addr("198.51.100.2:1")) {
		t.Fatal("second new source got a token of its own past MaxSources")
	}
	if n := l.Sources(); n != 4 {
		t.Fatalf("%d sources, over MaxSources", n)
	}
	c.add(time.Second) // every bucket refills; the next new source sweeps
	if !fail(l, addr("198.51.100.3:1")) {
		t.Fatal("new source refused after the table refilled")
	}
	if n := l.Sources(); n != 1 {
		t.Fatalf("%d sources after the sweep, want the new one only", n)
	}
}

func TestOff(t *testing.T) {
	l := New(Options{Burst: -1})
	for range 1000 {
		if !fail(l, addr("192.0.2.1:1")) {
			t.Fatal("refused with no limit")
		}
	}
	var nilL *Limiter
	if !fail(nilL, nil) {
		t.Fatal("a nil Limiter refused")
	}
}

// Logins that succeed are never refused, however many a source makes at
// once (a connection pool opening): a failed attempt is charged before
// the next is checked, so no success waits on a token another holds.
func TestParallelSuccessesNeverRefused(t *testing.T) {
	l := New(Options{Burst: 2, Interval: time.Hour})
	a := addr("192.0.2.1:1")
	fail(l, a) // one token left
	var refused atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if !succeed(l, a) {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := refused.Load(); n > 0 {
		t.Fatalf("%d of 1280 parallel logins with the right password refused", n)
	}
}
