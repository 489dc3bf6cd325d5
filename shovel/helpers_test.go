package shovel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/shovel"
)

// local starts inst's LocalConnector, as cmd/brokerd wires it into
// shovel.Options.Local, and closes it when the test ends (before the
// broker stops: cleanups run last-in first-out).
func local(t testing.TB, inst *brokertest.Instance) func(context.Context, string) (io.ReadWriteCloser, error) {
	lc := inst.Broker.NewLocalConnector(amqp.ServerConfig{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), brokertest.Wait)
		defer cancel()
		lc.Close(ctx)
	})
	return lc.Dial
}

// manager returns a Manager closed when the test ends.
func manager(t testing.TB, o shovel.Options) *shovel.Manager {
	if o.Node == "" {
		o.Node = "brokerd@test"
	}
	m := shovel.NewManager(o)
	t.Cleanup(m.Close)
	return m
}

// def parses a definition given as a Go map, failing the test on an error.
func def(t testing.TB, v map[string]any) shovel.Definition {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	d, err := shovel.ParseDefinition(raw)
	if err != nil {
		t.Fatalf("parse %s: %v", raw, err)
	}
	return d
}

// status returns the status of vhost/name (State "" if there is none).
func status(m *shovel.Manager, vhost, name string) shovel.Status {
	for _, s := range m.Status() {
		if s.Vhost == vhost && s.Name == name {
			return s
		}
	}
	return shovel.Status{}
}

// waitState waits until vhost/name is in state (the engine offers no
// event for it: Status is polled).
func waitState(t testing.TB, m *shovel.Manager, vhost, name, state string) shovel.Status {
	t.Helper()
	var s shovel.Status
	brokertest.Eventually(t, "shovel "+name+" "+state, func() error {
		s = status(m, vhost, name)
		if s.State != state {
			return fmt.Errorf("state %q (reason %q)", s.State, s.Reason)
		}
		return nil
	})
	return s
}

// consume returns the next n deliveries of queue on a consumer of its own
// with a prefetch of n, acknowledged (so that it takes no more), failing the test when one does not come within
// brokertest.Wait.
func consume(t testing.TB, s *brokertest.Session, queue string, n int) []amqp091.Delivery {
	t.Helper()
	ch, err := s.Conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	defer ch.Close()
	if err := ch.Qos(n, 0, false); err != nil {
		t.Fatalf("qos: %v", err)
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume %q: %v", queue, err)
	}
	out := make([]amqp091.Delivery, 0, n)
	timer := time.NewTimer(brokertest.Wait)
	defer timer.Stop()
	for len(out) < n {
		select {
		case d, ok := <-ds:
			if !ok {
				t.Fatalf("consumer of %q closed after %d of %d messages", queue, len(out), n)
			}
			out = append(out, d)
			if err := d.Ack(false); err != nil {
				t.Fatalf("ack: %v", err)
			}
			timer.Reset(brokertest.Wait)
		case <-timer.C:
			t.Fatalf("got %d of %d messages from %q", len(out), n, queue)
		}
	}
	return out
}

// publishN publishes n persistent messages "0" ... "n-1" to queue,
// confirmed.
func publishN(s *brokertest.Session, queue string, from, n int) {
	for i := from; i < from+n; i++ {
		s.Publish("", queue, amqp091.Publishing{DeliveryMode: 2, Body: []byte(fmt.Sprint(i))})
	}
}

// wantBodies fails the test unless ds are bodies from..from+n-1 in order.
func wantBodies(t testing.TB, ds []amqp091.Delivery, from int) {
	t.Helper()
	for i, d := range ds {
		if want := fmt.Sprint(from + i); string(d.Body) != want {
			t.Fatalf("message %d is %q, want %q", i, d.Body, want)
		}
	}
}

// discard is a logger that drops everything (benchmarks).
var discard = slog.New(slog.DiscardHandler)

// settled waits until queue of inst holds no message, ready or unacked:
// the shovel acknowledged everything it took, so that its stop or restart
// sends nothing back (that would be forwarded again).
func settled(t testing.TB, inst *brokertest.Instance, queue string) {
	t.Helper()
	brokertest.Eventually(t, queue+" settled", func() error {
		q, err := inst.Broker.Queue("/", queue)
		if err != nil {
			return err
		}
		if q.Messages() != 0 {
			return fmt.Errorf("%d ready, %d unacked", q.Ready, q.Unacked)
		}
		return nil
	})
}
