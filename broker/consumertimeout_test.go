// Tests of the consumer timeout: channels closed, deliveries requeued, per-queue timeouts.

package broker_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// ctCheck runs a consumer timeout check: the tests' brokers check only
// when told (ConsumerTimeoutCheck is an hour), on a clock the test moves.
func ctCheck(b *brokertest.Instance) { b.Broker.CheckConsumerTimeoutsForTest() }

// ctWantOpen checks that ch is still open with a round trip on it.
func ctWantOpen(t *testing.T, ch *amqp091.Channel, q string) {
	t.Helper()
	if _, err := ch.QueueDeclarePassive(q, false, false, false, false, nil); err != nil {
		t.Fatalf("channel closed: %v", err)
	}
}

// ctWantTimedOut waits for ch's close by the consumer timeout of ms.
func ctWantTimedOut(t *testing.T, closed <-chan *amqp091.Error, ms int) {
	t.Helper()
	e := prAwaitClose(t, closed, "channel")
	want := "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: " +
		strconv.Itoa(ms) + " ms. This timeout value can be configured, see consumers doc guide to learn more"
	if e.Code != amqp091.PreconditionFailed || e.Reason != want {
		t.Fatalf("channel closed with %d %q, want 406 %q", e.Code, e.Reason, want)
	}
}

// SPEC §1, RabbitMQ's consumer_timeout: deliveries unacknowledged past the
// timeout (30 minutes by default) close their channel with 406, and come
// back to the queue redelivered; the connection and its other channels
// stay; until the timeout the channel is left alone.
func TestConsumerTimeoutClosesChannelAndRequeues(t *testing.T) {
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk, Broker: broker.Options{
		ConsumerTimeout: 0, ConsumerTimeoutCheck: time.Hour, // the default timeout; checks by ctCheck
	}})
	ch := b.Session(t)
	ch.Declare("work", nil)
	for _, body := range []string{"a", "b", "c"} {
		ch.PublishBodies("work", body)
	}
	cconn := b.Dial(t) // the consumer's: its channel 1
	cch := brokertest.NewSession(t, cconn, brokertest.NoConfirm)
	closed := cch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := cch.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	msgs := dvConsume(t, cch, "work", "slow", false, nil)
	d1, d2 := dvRecv(t, msgs), dvRecv(t, msgs)
	if string(d1.Body) != "a" || string(d2.Body) != "b" {
		t.Fatalf("delivered %q %q", d1.Body, d2.Body)
	}

	clk.Advance(30*time.Minute - time.Second)
	ctCheck(b)
	ctWantOpen(t, cch.Channel, "work")
	clk.Advance(2 * time.Second)
	ctCheck(b)
	ctWantTimedOut(t, closed, 1800000)

	if cconn.IsClosed() {
		t.Fatal("the connection closed with the channel")
	}
	ctWantOpen(t, ch.Channel, "work")
	tlEventuallyReady(t, b, "work", 3)
	for _, want := range []string{"a", "b", "c"} {
		d := ch.Get("work")
		if string(d.Body) != want || d.Redelivered != (want != "c") {
			t.Fatalf("got %q redelivered %v, want %q redelivered %v", d.Body, d.Redelivered, want, want != "c")
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	// A late ack of a requeued delivery finds its channel gone.
	if err := d1.Ack(false); err == nil || !errors.Is(err, amqp091.ErrClosed) {
		t.Fatalf("late ack: %v, want the channel closed", err)
	}
}

// The queue's own timeout, the smaller of x-consumer-timeout and the
// policy's consumer-timeout, applies before the broker's; basic.get
// deliveries count; a queue without one keeps the broker's; negative
// disables the broker's.
func TestConsumerTimeoutPerQueue(t *testing.T) {
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk, Broker: broker.Options{
		ConsumerTimeout: -1, ConsumerTimeoutCheck: time.Hour, // no broker-wide timeout; checks by ctCheck
	}})
	ch := b.Session(t)
	ch.Declare("by-arg", amqp091.Table{"x-consumer-timeout": int64(60000)})
	ch.Declare("by-both", amqp091.Table{"x-consumer-timeout": int64(60000)})
	ch.Declare("none", nil)
	tlSetPolicy(t, b, broker.Policy{Name: "ct", Pattern: "^by-both$", Definition: map[string]any{"consumer-timeout": 5000}})
	for _, q := range []string{"by-arg", "by-both", "none"} {
		ch.PublishBodies(q, q)
	}
	get := func(q string) (*amqp091.Channel, <-chan *amqp091.Error) {
		c := b.Dial(t)
		gch, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok, err := gch.Get(q, false); !ok || err != nil {
			t.Fatalf("get %s: %v %v", q, ok, err)
		}
		return gch, gch.NotifyClose(make(chan *amqp091.Error, 1))
	}
	argCh, argClosed := get("by-arg")
	_, bothClosed := get("by-both")
	noneCh, _ := get("none")

	clk.Advance(6 * time.Second)
	ctCheck(b)
	ctWantTimedOut(t, bothClosed, 5000)
	ctWantOpen(t, argCh, "by-arg")
	clk.Advance(55 * time.Second)
	ctCheck(b)
	ctWantTimedOut(t, argClosed, 60000)
	clk.Advance(24 * time.Hour)
	ctCheck(b)
	ctWantOpen(t, noneCh, "none")
}

// x-consumer-timeout and the policy key take non-negative integers, with
// RabbitMQ's errors.
func TestConsumerTimeoutValidation(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	if _, err := ch.QueueDeclare("bad", false, false, false, false, amqp091.Table{"x-consumer-timeout": int32(-1)}); err == nil {
		t.Fatal("declare with x-consumer-timeout -1 succeeded")
	}
	e := prAwaitClose(t, closed, "channel")
	if want := "PRECONDITION_FAILED - invalid arg 'x-consumer-timeout' for queue 'bad' in vhost '/': {value_negative,-1}"; e.Reason != want {
		t.Fatalf("got %q, want %q", e.Reason, want)
	}
	err := b.Broker.SetPolicy("/", broker.Policy{Name: "p", Pattern: ".*", Definition: map[string]any{"consumer-timeout": -5}})
	var pe *broker.PolicyError
	if !errors.As(err, &pe) || !strings.Contains(pe.Msg, "-5 is not a valid consumer timeout") {
		t.Fatalf("policy with consumer-timeout -5: %v", err)
	}
}

// With Options.ConsumerTimeoutCancel, as RabbitMQ 4.3: a delivery past the
// timeout, to a client that announced consumer_cancel_notify (amqp091-go
// does), cancels its consumer alone (basic.cancel) and goes back to the
// queue redelivered; the channel, its other consumers and the consumer's
// deliveries not yet overdue stay, those returning in turn when overdue,
// without a second cancel; a late ack of a returned delivery is ignored.
func TestConsumerTimeoutCancelsConsumer(t *testing.T) {
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk, Broker: broker.Options{
		ConsumerTimeout: time.Minute, ConsumerTimeoutCheck: time.Hour, ConsumerTimeoutCancel: true,
	}})
	ch := b.Session(t)
	ch.Declare("work", nil)
	ch.Declare("other", nil)
	cconn := b.Dial(t)
	cch := brokertest.NewSession(t, cconn, brokertest.NoConfirm)
	closed := cch.NotifyClose(make(chan *amqp091.Error, 1))
	cancels := cch.NotifyCancel(make(chan string, 2))
	slow := dvConsume(t, cch, "work", "slow", false, nil)
	fine := dvConsume(t, cch, "other", "fine", false, nil)

	ch.PublishBodies("work", "a")
	a := dvRecv(t, slow)
	clk.Advance(40 * time.Second)
	ch.PublishBodies("work", "b")
	bd := dvRecv(t, slow)
	clk.Advance(21 * time.Second) // a is 61 s old, b 21 s
	ctCheck(b)
	select {
	case tag := <-cancels:
		if tag != "slow" {
			t.Fatalf("basic.cancel for %q, want slow", tag)
		}
	case <-time.After(brokertest.Wait):
		t.Fatal("no basic.cancel")
	}
	select {
	case d, ok := <-slow:
		if ok {
			t.Fatalf("delivery %q after the cancel", d.Body)
		}
	case <-time.After(brokertest.Wait):
		t.Fatal("the cancelled consumer's deliveries go on")
	}
	ctWantOpen(t, cch.Channel, "work")
	tlEventuallyReady(t, b, "work", 1) // a; b is still the client's
	if st, _ := b.Broker.QueueStats("/", "work"); st.Consumers != 0 || st.Unacked != 1 {
		t.Fatalf("work: %d consumers, %d unacked; want 0, 1", st.Consumers, st.Unacked)
	}
	// The late ack of a is ignored; the channel goes on.
	if err := a.Ack(false); err != nil {
		t.Fatal(err)
	}
	ctWantOpen(t, cch.Channel, "work")
	// The other consumer on the channel still gets its deliveries.
	ch.PublishBodies("other", "x")
	if x := dvRecv(t, fine); string(x.Body) != "x" {
		t.Fatalf("other consumer got %q", x.Body)
	}
	// b, once overdue too, returns without another cancel.
	clk.Advance(time.Minute)
	ctCheck(b)
	tlEventuallyReady(t, b, "work", 2)
	ctWantOpen(t, cch.Channel, "work")
	select {
	case tag := <-cancels:
		t.Fatalf("a second basic.cancel, for %q", tag)
	case e := <-closed:
		t.Fatalf("channel closed: %v", e)
	default:
	}
	if err := bd.Ack(false); err != nil { // ignored too
		t.Fatal(err)
	}
	ctWantOpen(t, cch.Channel, "work")
	for _, want := range []string{"a", "b"} {
		d := ch.Get("work")
		if string(d.Body) != want || !d.Redelivered {
			t.Fatalf("got %q redelivered %v, want %q redelivered", d.Body, d.Redelivered, want)
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	// An unknown tag is still one.
	if err := cch.Ack(999, false); err != nil {
		t.Fatal(err)
	}
	e := prAwaitClose(t, closed, "channel")
	if e.Code != amqp091.PreconditionFailed || e.Reason != "PRECONDITION_FAILED - unknown delivery tag 999" {
		t.Fatalf("ack of tag 999: %d %q", e.Code, e.Reason)
	}
}

// Even with Options.ConsumerTimeoutCancel, the channel is closed as before
// (406) for a client that did not announce consumer_cancel_notify, and for
// a basic.get delivery, which has no consumer to cancel.
func TestConsumerTimeoutCancelFallsBackToClose(t *testing.T) {
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk, Broker: broker.Options{
		ConsumerTimeout: time.Minute, ConsumerTimeoutCheck: time.Hour, ConsumerTimeoutCancel: true,
	}})
	ch := b.Session(t)
	ch.Declare("work", nil)
	ch.PublishBodies("work", "a", "b")

	r := dialRaw(t, b.Addr)
	r.handshake(rawOpts{}) // no capabilities
	r.openChannel(1)
	r.send(1, &amqp.BasicQos{PrefetchCount: 1}) // b is left for the get
	rawExpect[*amqp.BasicQosOk](r, 1)
	r.send(1, &amqp.BasicConsume{Queue: "work", ConsumerTag: "raw"})
	rawExpect[*amqp.BasicConsumeOk](r, 1)
	rawExpect[*amqp.BasicDeliver](r, 1)
	r.frame() // its header
	r.frame() // and body

	gconn := b.Dial(t)
	gch, err := gconn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	gclosed := gch.NotifyClose(make(chan *amqp091.Error, 1))
	if _, ok, err := gch.Get("work", false); !ok || err != nil {
		t.Fatalf("get: %v %v", ok, err)
	}

	clk.Advance(61 * time.Second)
	ctCheck(b)
	cl := rawExpect[*amqp.ChannelClose](r, 1)
	if want := "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: 60000 ms. This timeout value can be configured, see consumers doc guide to learn more"; cl.ReplyCode != 406 || cl.ReplyText != want {
		t.Fatalf("channel.close %d %q; want 406 %q", cl.ReplyCode, cl.ReplyText, want)
	}
	ctWantTimedOut(t, gclosed, 60000)
	tlEventuallyReady(t, b, "work", 2)
}
