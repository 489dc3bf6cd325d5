// Helpers of the protocol tests (pr*): bystanders, close and error checks, raw frames.

package broker_test

// Helpers, prefixed pr, for the protocol tests (protocol_*_test.go) and
// others that expect a connection or channel to close: a bystander
// connection that must survive another's misbehaviour, close and error
// checks, and frame builders. The raw client is in rawclient_test.go.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// prWait bounds every wait for an event a test expects.
const prWait = 5 * time.Second

// prBystander is a connection opened before a test misbehaves on another
// one; check proves it still publishes and consumes afterwards.
type prBystander struct {
	conn  *amqp091.Connection
	ch    *amqp091.Channel
	queue string
	msgs  <-chan amqp091.Delivery
	n     atomic.Int64
}

func prNewBystander(t *testing.T, b *brokertest.Instance) *prBystander {
	t.Helper()
	conn, ch := b.Channel(t)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatalf("bystander declare: %v", err)
	}
	msgs, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("bystander consume: %v", err)
	}
	return &prBystander{conn: conn, ch: ch, queue: q.Name, msgs: msgs}
}

func (by *prBystander) check(t *testing.T) {
	t.Helper()
	if by.conn.IsClosed() {
		t.Fatal("bystander connection was closed")
	}
	body := fmt.Sprintf("ping %d", by.n.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), prWait)
	defer cancel()
	if err := by.ch.PublishWithContext(ctx, "", by.queue, false, false, amqp091.Publishing{Body: []byte(body)}); err != nil {
		t.Fatalf("bystander publish: %v", err)
	}
	select {
	case d, ok := <-by.msgs:
		if !ok {
			t.Fatal("bystander consumer closed")
		}
		if string(d.Body) != body {
			t.Fatalf("bystander got %q, want %q", d.Body, body)
		}
	case <-ctx.Done():
		t.Fatal("bystander got no delivery")
	}
}

// prAmqpErr returns err as an *amqp091.Error, failing the test otherwise.
func prAmqpErr(t *testing.T, err error) *amqp091.Error {
	t.Helper()
	var e *amqp091.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *amqp091.Error", err, err)
	}
	return e
}

// prAwaitClose waits for a NotifyClose channel to deliver an error.
func prAwaitClose(t *testing.T, c <-chan *amqp091.Error, what string) *amqp091.Error {
	t.Helper()
	select {
	case e := <-c:
		if e == nil {
			t.Fatalf("%s closed without an error", what)
		}
		return e
	case <-time.After(prWait):
		t.Fatalf("%s not closed within %v", what, prWait)
	}
	return nil
}

func prWantCode(t *testing.T, e *amqp091.Error, code int, text string) {
	t.Helper()
	if e.Code != code || !strings.Contains(e.Reason, text) {
		t.Fatalf("got %d %q, want %d containing %q", e.Code, e.Reason, code, text)
	}
}

// prFrame encodes one frame.
func prFrame(typ uint8, ch uint16, payload []byte) []byte {
	return amqp.AppendFrame(nil, amqp.Frame{Type: typ, Channel: ch, Payload: payload})
}

func prCat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
