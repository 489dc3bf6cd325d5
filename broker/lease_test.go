package broker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// testLease is a lease the test holds, lapses and ends by hand (the
// cluster's is package cluster's Lease).
type testLease struct {
	held     atomic.Bool
	mu       sync.Mutex
	regained chan struct{}
	ended    bool
}

func newTestLease() *testLease { return &testLease{regained: make(chan struct{})} }

func (l *testLease) Held() bool { return l.held.Load() }

func (l *testLease) Regained() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return nil
	}
	return l.regained
}

func (l *testLease) hold() {
	l.held.Store(true)
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.regained)
	l.regained = make(chan struct{})
}

func (l *testLease) lapse() { l.held.Store(false) }

func (l *testLease) end() {
	l.held.Store(false)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
	close(l.regained)
}

// A broker under a cluster leader's lease (Options.Lease) delivers nothing
// while it lapses — neither to a consumer nor to a basic.get, which waits
// — and delivers what waited once it is regained; after its end a
// basic.get finds nothing.
func TestLeaseGatesDeliveries(t *testing.T) {
	lease := newTestLease()
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Lease: lease}})
	_, ch := b.Channel(t)
	for _, q := range []string{"leased-get", "leased-consume"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	publish := func(q, body string) {
		t.Helper()
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(body)})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish to %s: %v", q, err)
		}
	}
	publish("leased-get", "g1")
	publish("leased-consume", "c1")

	var regained atomic.Bool // set before the lease is held: what arrives must see it
	_, getCh := b.Channel(t)
	got := make(chan amqp091.Delivery, 1)
	go func() {
		d, ok, err := getCh.Get("leased-get", true)
		if err != nil || !ok {
			t.Errorf("get under a lapsed lease: ok %t, %v", ok, err)
		}
		if !regained.Load() {
			t.Error("a basic.get answered while the lease lapsed")
		}
		got <- d
	}()
	_, consCh := b.Channel(t)
	raw, err := consCh.Consume("leased-consume", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	deliveries := make(chan amqp091.Delivery, 2)
	go func() {
		for d := range raw {
			if !regained.Load() {
				t.Errorf("%q delivered while the lease lapsed", d.Body)
			}
			deliveries <- d
		}
	}()
	// Whatever arrives before the lease is held fails the test (the
	// consume-ok round trip gives a broker that ignored the lease time
	// to answer the get).
	regained.Store(true)
	lease.hold()
	select {
	case d := <-got:
		if string(d.Body) != "g1" {
			t.Fatalf("get returned %q", d.Body)
		}
	case <-ctx.Done():
		t.Fatal("the waiting basic.get got nothing once the lease was regained")
	}
	select {
	case d := <-deliveries:
		if string(d.Body) != "c1" {
			t.Fatalf("consumer got %q", d.Body)
		}
	case <-ctx.Done():
		t.Fatal("the consumer got nothing once the lease was regained")
	}

	// Lapsed again: a publish reaches the consumer only at the regain.
	lease.lapse()
	regained.Store(false)
	publish("leased-consume", "c2")
	regained.Store(true)
	lease.hold()
	select {
	case d := <-deliveries:
		if string(d.Body) != "c2" {
			t.Fatalf("consumer got %q", d.Body)
		}
	case <-ctx.Done():
		t.Fatal("the consumer got nothing once the lease was regained again")
	}

	// Ended: a get waiting finds nothing, and one after it too.
	publish("leased-get", "g2")
	lease.lapse()
	ended := make(chan bool, 1)
	go func() {
		_, ok, err := getCh.Get("leased-get", true)
		if err != nil {
			t.Errorf("get as the lease ends: %v", err)
		}
		ended <- ok
	}()
	lease.end()
	if ok := <-ended; ok {
		t.Fatal("a basic.get got a message under an ended lease")
	}
	if _, ok, err := getCh.Get("leased-get", true); err != nil || ok {
		t.Fatalf("a get after the lease's end: ok %t, %v", ok, err)
	}
}
