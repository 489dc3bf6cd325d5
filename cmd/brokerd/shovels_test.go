package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/mgmt"
	"github.com/brokerd/brokerd/store/memstore"
)

// localEngine is a stand-in shovel engine (the real one is package
// shovel's): Start opens the shovel's "amqp://" side through Local, as
// the engine does, and hands the connection to the test.
type localEngine struct {
	local   func(ctx context.Context, vhost string) (io.ReadWriteCloser, error)
	mu      sync.Mutex
	started chan *amqp091.Connection
	errs    chan error
	stopped []string
}

func (e *localEngine) Validate(vhost, name string, v json.RawMessage) error {
	if !json.Valid(v) {
		return errors.New("not JSON")
	}
	return nil
}

func (e *localEngine) Start(vhost, name string, v json.RawMessage) {
	c, err := e.local(context.Background(), vhost)
	if err != nil {
		e.errs <- err
		return
	}
	conn, err := amqp091.Open(c, amqp091.Config{Vhost: vhost, SASL: []amqp091.Authentication{&amqp091.PlainAuth{Username: "any", Password: "thing"}}})
	if err != nil {
		e.errs <- err
		return
	}
	e.started <- conn
}

func (e *localEngine) Stop(vhost, name string) {
	e.mu.Lock()
	e.stopped = append(e.stopped, vhost+"/"+name)
	e.mu.Unlock()
}
func (e *localEngine) Restart(vhost, name string) bool { return false }
func (e *localEngine) Status() []mgmt.ShovelStatus     { return nil }
func (e *localEngine) Close()                          {}

// A shovel's "amqp://" side is an internal connection to the broker: it
// opens in a vhost where no user has permissions, may do everything
// there, publishes a message carrying another user's user_id (a shovel
// forwards them as they are), and a stored shovel parameter is started
// at start; clearing it stops the shovel.
func TestShovelLocalConnection(t *testing.T) {
	engine := &localEngine{started: make(chan *amqp091.Connection, 1), errs: make(chan error, 1)}
	newShovelEngine = func(o shovelOptions) shovelEngine {
		engine.local = func(ctx context.Context, vhost string) (io.ReadWriteCloser, error) { return o.Local(ctx, vhost) }
		return engine
	}
	defer func() { newShovelEngine = newShovelManager }()
	st := memstore.New()
	log := slog.New(slog.DiscardHandler)
	open := func() (*broker.Broker, *shovels) {
		sh := newShovels(log, "n1")
		o := broker.Options{Store: st, Logger: log}
		sh.register(&o)
		b, err := broker.Open(o)
		if err != nil {
			t.Fatal(err)
		}
		sh.serve(b, amqp.ServerConfig{Logger: log})
		return b, sh
	}
	b, sh := open()
	if err := b.PutVHost(broker.VHostInfo{Name: "moved"}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetParameter("moved", "shovel", "s", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	use := func() {
		t.Helper()
		var conn *amqp091.Connection
		select {
		case conn = <-engine.started:
		case err := <-engine.errs:
			t.Fatal(err)
		case <-time.After(10 * time.Second): // a bound, not a synchronisation
			t.Fatal("the shovel did not start")
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		conf, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", "q", false, false,
			amqp091.Publishing{UserId: "someone-else", Body: []byte("m"), DeliveryMode: amqp091.Persistent})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := conf.WaitContext(t.Context()); !ok || err != nil {
			t.Fatalf("publish with another user's user_id: ack %v %v", ok, err)
		}
		if m, ok, err := ch.Get("q", true); err != nil || !ok || m.UserId != "someone-else" {
			t.Fatalf("get: %v %v %v", m, ok, err)
		}
	}
	use()
	sh.close()
	b.Close()

	// At start the stored shovel starts again.
	b, sh = open()
	defer func() { sh.close(); b.Close() }()
	use()
	if err := b.ClearParameter("moved", "shovel", "s"); err != nil {
		t.Fatal(err)
	}
	engine.mu.Lock()
	defer engine.mu.Unlock()
	if len(engine.stopped) != 1 || engine.stopped[0] != "moved/s" {
		t.Fatalf("stopped %q", engine.stopped)
	}
}
