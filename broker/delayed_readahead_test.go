package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// Held messages due one millisecond after another, waiting in the store
// (beyond the holding queue's page window), are read ahead of their due
// times together, in one store read for each 50 ms of due times, not one
// read each millisecond; and each is still released at its due time, not
// before. The clock moves a millisecond at a time, as real time passes
// (a jump would fire every read-ahead at once).
func TestDelayedReadAheadBatched(t *testing.T) {
	reads, entries, restore := broker.CountDueReadsForTest()
	defer restore()
	clk := brokertest.NewClock() // at a multiple of 50 ms: the due times below fill one span
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t, brokertest.Persistent)
	sdDeclare(t, ch, "dx", "direct", nil, brokertest.Durable)
	ch.Declare("q", nil, brokertest.Durable)
	ch.Bind("q", "k", "dx", nil)
	start := clk.Now()
	const n = 50
	for i := range n {
		ch.Publish("dx", "k", sdPub(fmt.Sprintf("m%02d", i), sdDelay(int64(1000+i))))
	}
	ch.Sync()
	sdWantHeld(t, b, "dx", n)
	for at := time.Duration(0); at < time.Second+n*time.Millisecond; at += time.Millisecond {
		sdAdvanceTo(b, clk, start, at)
		due := 0
		if at >= time.Second {
			due = int(min((at-time.Second)/time.Millisecond+1, n))
		}
		if held := sdHeld(t, b, "dx"); held != int64(n-due) {
			t.Fatalf("at +%v the exchange holds %d, want %d (%d due)", at, held, n-due, due)
		}
	}
	tlEventuallyReady(t, b, "q", n)
	if got, paged := reads.Load(), entries.Load(); got != 1 || paged < n-2*brokertest.TestPageWindow {
		t.Fatalf("%d reads ahead of %d entries; want 1 read of the %d or so beyond the page window", got, paged, n-2*brokertest.TestPageWindow)
	}
	ds := ch.GetN("q", n)
	for i, d := range ds {
		if want := fmt.Sprintf("m%02d", i); string(d.Body) != want {
			t.Fatalf("delivery %d is %q, want %q (due-time order)", i, d.Body, want)
		}
	}
}
