package amqp

import (
	"testing"
	"time"
)

// granted reports whether ch is closed, waiting up to d for it (d is the
// point: a grant that must not come is checked for a while).
func granted(ch <-chan uint64, d time.Duration) (uint64, bool) {
	select {
	case n := <-ch:
		return n, true
	case <-time.After(d):
		return 0, false
	}
}

// waitAsync waits for size in the background, in line from the call on:
// waiters called one after the other are served in that order.
func waitAsync(b *contentBudget, size uint64, cancel <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	w := b.enqueue(size)
	go func() { out <- b.await(w, cancel) }()
	return out
}

// The budget's rules: first come first served, a body larger than the
// budget reserves all of it and so goes alone, a forced reservation goes
// past the limit and holds newcomers back until it is back under, a
// cancelled wait gives its place back, and a changed limit lets waiters
// in at once.
func TestContentBudgetRules(t *testing.T) {
	b := newContentBudget(100)
	if n := b.tryAcquire(60, false); n != 60 {
		t.Fatalf("tryAcquire(60) = %d", n)
	}
	if n := b.tryAcquire(50, false); n != 0 {
		t.Fatalf("tryAcquire(50) with 60 of 100 taken = %d, want 0", n)
	}
	never := make(chan struct{})
	big := waitAsync(b, 500, never) // clamped to 100: alone
	if _, ok := granted(big, 20*time.Millisecond); ok {
		t.Fatal("a body larger than the budget was let in beside another")
	}
	small := waitAsync(b, 10, never)
	if _, ok := granted(small, 20*time.Millisecond); ok {
		t.Fatal("a later waiter overtook an earlier one")
	}
	if n := b.tryAcquire(10, false); n != 0 {
		t.Fatal("tryAcquire overtook the waiters")
	}
	if n := b.tryAcquire(30, true); n != 30 {
		t.Fatalf("forced tryAcquire = %d, want 30", n)
	}
	b.release(60)
	if _, ok := granted(big, 20*time.Millisecond); ok {
		t.Fatal("the large body was let in while a forced reservation was held")
	}
	b.release(30)
	if n, ok := granted(big, time.Second); !ok || n != 100 {
		t.Fatalf("large body: granted %v, reserved %d, want the whole budget, 100", ok, n)
	}
	if _, ok := granted(small, 20*time.Millisecond); ok {
		t.Fatal("a waiter was let in beside the body that took the whole budget")
	}
	b.release(100)
	if n, ok := granted(small, time.Second); !ok || n != 10 {
		t.Fatalf("small body: granted %v, reserved %d", ok, n)
	}

	// A cancelled wait lets those behind it in.
	cancel := make(chan struct{})
	blocker := waitAsync(b, 95, cancel)
	behind := waitAsync(b, 5, never)
	if _, ok := granted(behind, 20*time.Millisecond); ok {
		t.Fatal("overtook a waiter")
	}
	close(cancel)
	if n, _ := granted(blocker, time.Second); n != 0 {
		t.Fatalf("cancelled wait reserved %d", n)
	}
	if n, ok := granted(behind, time.Second); !ok || n != 5 {
		t.Fatalf("behind a cancelled wait: granted %v, %d", ok, n)
	}

	// A raised limit lets a waiter in; a lowered one clamps what waits.
	wide := waitAsync(b, 200, never)
	if _, ok := granted(wide, 20*time.Millisecond); ok {
		t.Fatal("let in past the limit")
	}
	b.setLimit(300)
	if n, ok := granted(wide, time.Second); !ok || n != 200 {
		t.Fatalf("after the limit was raised: granted %v, %d", ok, n)
	}
	b.release(200 + 10 + 5)
	if b.used.Load() != 0 || b.peak.Load() != 215 {
		t.Fatalf("used %d, peak %d, want 0 and 215", b.used.Load(), b.peak.Load())
	}
}
