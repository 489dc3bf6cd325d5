package brokertest

import (
	"context"
	"net"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/store"
)

// TestPageWindow is the broker's page window in tests that do not set
// one: tiny, so every test that holds more than a few messages in a
// durable queue runs through paging (refills, page-outs, recovery from
// counters) on every store.
const TestPageWindow = 4

// Instance is a running broker.
type Instance struct {
	URL    string // amqp://guest:guest@127.0.0.1:port/
	Addr   string
	Broker *broker.Broker
	// Store is the store the broker runs on (unwrapped: Config.WrapStore
	// is not applied to it). It changes on Restart and Crash.
	Store store.Store
	// Backend made Store.
	Backend Backend

	t      testing.TB
	cfg    Config
	srv    *amqp.Server
	ln     net.Listener
	served chan struct{}
}

// Config adjusts the instance. Zero values take the daemon's defaults.
type Config struct {
	Server amqp.ServerConfig // Handler is set by Start
	Broker broker.Options    // Store is set by Start
	// Backend makes the store; Selected(t) if nil.
	Backend Backend
	// WrapStore, if set, wraps the store the broker uses (to record or
	// break what the broker writes). It is called again on every restart
	// with the reopened store.
	WrapStore func(store.Store) store.Store
	// Clock, if set, is the broker's clock and its timers' (Broker.Now
	// and Broker.TimerClock, where those are not set): time moves only
	// when the test advances it.
	Clock *Clock
}

// Start runs a broker until the test ends.
func Start(t testing.TB, cfg Config) *Instance {
	t.Helper()
	be := cfg.Backend
	if be == nil {
		be = Selected(t)
	}
	i := &Instance{t: t, cfg: cfg, Backend: be}
	i.Store = be.Open(t)
	t.Cleanup(func() {
		i.Stop()
		if err := i.Store.Close(); err != nil {
			t.Errorf("close %s store: %v", be.Name(), err)
		}
	})
	i.start("127.0.0.1:0")
	return i
}

func (i *Instance) start(addr string) {
	t := i.t
	t.Helper()
	bo := i.cfg.Broker
	bo.Store = i.Store
	if c := i.cfg.Clock; c != nil {
		if bo.Now == nil {
			bo.Now = c.Now
		}
		if bo.TimerClock == nil {
			bo.TimerClock = c.Timers()
		}
	}
	if bo.PageWindow == 0 {
		bo.PageWindow = TestPageWindow
	}
	if i.cfg.WrapStore != nil {
		bo.Store = i.cfg.WrapStore(i.Store)
	}
	b, err := broker.Open(bo)
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	sc := i.cfg.Server
	sc.Handler = b
	i.Broker, i.srv = b, amqp.NewServer(sc)
	var ln net.Listener
	// The port of a restarted instance may take a moment to be free.
	for try := 0; ; try++ {
		ln, err = net.Listen("tcp", addr)
		if err == nil || try == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	i.ln = ln
	i.Addr = ln.Addr().String()
	i.URL = "amqp://guest:guest@" + i.Addr + "/"
	i.served = make(chan struct{})
	go func() {
		defer close(i.served)
		i.srv.Serve(ln)
	}()
}

// Server returns the AMQP server the broker is served by (a new one after
// Restart and Crash).
func (i *Instance) Server() *amqp.Server { return i.srv }

// Stop shuts the broker down (connections get 320 CONNECTION_FORCED).
// Idempotent.
func (i *Instance) Stop() {
	if i.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := i.srv.Shutdown(ctx); err != nil {
		i.t.Errorf("shutdown: %v", err)
	}
	<-i.served
	i.Broker.Close()
	i.srv = nil
}

// Restart stops the broker and starts a new one on the same address over
// the store as it would be after a restart (durable state only).
func (i *Instance) Restart() {
	i.t.Helper()
	addr := i.Addr
	i.Stop()
	i.Store = i.Backend.Reopen(i.t, i.Store)
	i.start(addr)
}

// Crash is Restart without the broker's shutdown: the store is reopened
// as it is now, as after a kill -9 (what a graceful stop would write, such
// as the deletion of exclusive queues, never reaches it), then the old
// broker is stopped and a new one started on the same address.
func (i *Instance) Crash() {
	i.t.Helper()
	addr := i.Addr
	i.Store = i.Backend.Reopen(i.t, i.Store) // the old broker's later writes fail
	i.Stop()
	i.start(addr)
}

// Dial connects with amqp091-go.
func (i *Instance) Dial(t testing.TB) *amqp091.Connection {
	t.Helper()
	c, err := amqp091.Dial(i.URL)
	if err != nil {
		t.Fatalf("dial %s: %v", i.URL, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Channel connects and opens a channel.
func (i *Instance) Channel(t testing.TB) (*amqp091.Connection, *amqp091.Channel) {
	t.Helper()
	c := i.Dial(t)
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	return c, ch
}
