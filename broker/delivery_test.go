package broker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/internal/brokertest"
)

// Tests of publishing, consuming and acknowledgements through amqp091-go
// against a real broker. Helpers are prefixed dv so as not to collide with
// other files of the package.

// dvWait bounds every wait for something that must happen.
const dvWait = 5 * time.Second

func dvCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), dvWait)
	t.Cleanup(cancel)
	return ctx
}

func dvDeclare(t testing.TB, ch *amqp091.Channel, name string, args amqp091.Table) string {
	t.Helper()
	q, err := ch.QueueDeclare(name, false, false, false, false, args)
	if err != nil {
		t.Fatalf("declare %q: %v", name, err)
	}
	return q.Name
}

func dvPublish(t testing.TB, ch *amqp091.Channel, exchange, key string, p amqp091.Publishing) {
	t.Helper()
	if err := ch.PublishWithContext(dvCtx(t), exchange, key, false, false, p); err != nil {
		t.Fatalf("publish to %q/%q: %v", exchange, key, err)
	}
}

// dvPublishBodies publishes each body to queue q through the default exchange.
func dvPublishBodies(t testing.TB, ch *amqp091.Channel, q string, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		dvPublish(t, ch, "", q, amqp091.Publishing{Body: []byte(b)})
	}
}

func dvNumbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func dvConsume(t testing.TB, ch *amqp091.Channel, q, tag string, noAck bool, args amqp091.Table) <-chan amqp091.Delivery {
	t.Helper()
	msgs, err := ch.Consume(q, tag, noAck, false, false, false, args)
	if err != nil {
		t.Fatalf("consume %q: %v", q, err)
	}
	return msgs
}

func dvRecv(t testing.TB, msgs <-chan amqp091.Delivery) amqp091.Delivery {
	t.Helper()
	select {
	case d, ok := <-msgs:
		if !ok {
			t.Fatal("delivery channel closed")
		}
		return d
	case <-time.After(dvWait):
		t.Fatal("no delivery")
	}
	panic("unreachable")
}

func dvRecvN(t testing.TB, msgs <-chan amqp091.Delivery, n int) []amqp091.Delivery {
	t.Helper()
	out := make([]amqp091.Delivery, n)
	for i := range out {
		out[i] = dvRecv(t, msgs)
	}
	return out
}

func dvBodies(ds []amqp091.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Body)
	}
	return out
}

func dvWantBodies(t testing.TB, what string, ds []amqp091.Delivery, want ...string) {
	t.Helper()
	if got := dvBodies(ds); !slices.Equal(got, want) {
		t.Fatalf("%s: bodies %q, want %q", what, got, want)
	}
}

// dvReady returns the queue's ready count. It is a round trip on ch, so the
// broker has handled everything sent on ch's connection before it.
func dvReady(t testing.TB, ch *amqp091.Channel, q string) int {
	t.Helper()
	st, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
	if err != nil {
		t.Fatalf("passive declare %q: %v", q, err)
	}
	return st.Messages
}

func dvWantReady(t testing.TB, ch *amqp091.Channel, q string, want int) {
	t.Helper()
	if got := dvReady(t, ch, q); got != want {
		t.Fatalf("queue %q has %d ready messages, want %d", q, got, want)
	}
}

func dvGet(t testing.TB, ch *amqp091.Channel, q string, noAck bool) amqp091.Delivery {
	t.Helper()
	d, ok, err := ch.Get(q, noAck)
	if err != nil {
		t.Fatalf("get %q: %v", q, err)
	}
	if !ok {
		t.Fatalf("get %q: empty", q)
	}
	return d
}

func dvGetN(t testing.TB, ch *amqp091.Channel, q string, n int) []amqp091.Delivery {
	t.Helper()
	out := make([]amqp091.Delivery, n)
	for i := range out {
		out[i] = dvGet(t, ch, q, false)
	}
	return out
}

func dvWantEmpty(t testing.TB, ch *amqp091.Channel, q string) {
	t.Helper()
	d, ok, err := ch.Get(q, true)
	if err != nil {
		t.Fatalf("get %q: %v", q, err)
	}
	if ok {
		t.Fatalf("get %q: got %q, want get-empty", q, d.Body)
	}
}

func dvChannel(t testing.TB, c *amqp091.Connection) *amqp091.Channel {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	return ch
}

// dvNotifyClose must be called before the close is provoked.
func dvNotifyClose(ch *amqp091.Channel) chan *amqp091.Error {
	return ch.NotifyClose(make(chan *amqp091.Error, 1))
}

func dvAwaitClose(t testing.TB, c chan *amqp091.Error, code int, reason string) {
	t.Helper()
	select {
	case e, ok := <-c:
		if !ok || e == nil {
			t.Fatalf("closed without an error, want %d %q", code, reason)
		}
		if e.Code != code || e.Reason != reason {
			t.Fatalf("closed with %d %q, want %d %q", e.Code, e.Reason, code, reason)
		}
	case <-time.After(dvWait):
		t.Fatalf("not closed; want %d %q", code, reason)
	}
}

func dvWantErr(t testing.TB, err error, code int, reason string) {
	t.Helper()
	var e *amqp091.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want %d %q", err, err, code, reason)
	}
	if e.Code != code || e.Reason != reason {
		t.Fatalf("error %d %q, want %d %q", e.Code, e.Reason, code, reason)
	}
}

func dvAck(t testing.TB, d amqp091.Delivery, multiple bool) {
	t.Helper()
	if err := d.Ack(multiple); err != nil {
		t.Fatalf("ack %d: %v", d.DeliveryTag, err)
	}
}

// --- properties and headers ---

func dvAllHeaders() amqp091.Table {
	// Only types amqp091 decodes back to the same Go type: it sends int as
	// 'I' and reads it as int32, so int32 is used.
	return amqp091.Table{
		"string":    "s",
		"empty":     "",
		"int8":      int8(-8),
		"uint8":     uint8(200),
		"int16":     int16(-1600),
		"uint16":    uint16(60000),
		"int32":     int32(-320000),
		"uint32":    uint32(4000000000),
		"int64":     int64(-1 << 40),
		"float32":   float32(1.5),
		"float64":   float64(-2.25),
		"decimal":   amqp091.Decimal{Scale: 2, Value: 12345},
		"true":      true,
		"false":     false,
		"timestamp": time.Unix(1700000000, 0),
		"table":     amqp091.Table{"nested": "x", "deeper": amqp091.Table{"n": int32(1)}},
		"array":     []any{"a", int32(1), true, nil, []any{int64(2)}, amqp091.Table{"k": "v"}, []byte{9}},
		"bytes":     []byte{0, 1, 2, 255},
		"void":      nil,
	}
}

func TestDeliveryPropertiesRoundTrip(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	q := dvDeclare(t, ch, "props", nil)
	body := make([]byte, 300_000) // several frames
	for i := range body {
		body[i] = byte(i * 7)
	}
	pub := amqp091.Publishing{
		Headers:         dvAllHeaders(),
		ContentType:     "application/json",
		ContentEncoding: "gzip",
		DeliveryMode:    amqp091.Persistent,
		Priority:        7,
		CorrelationId:   "corr-1",
		ReplyTo:         "reply-queue",
		MessageId:       "msg-1",
		Timestamp:       time.Unix(1600000000, 0),
		Type:            "order.created",
		UserId:          "guest",
		AppId:           "app-1",
		Body:            body,
	}
	check := func(how string, d amqp091.Delivery) {
		t.Helper()
		got := amqp091.Publishing{
			Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
			DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId,
			ReplyTo: d.ReplyTo, Expiration: d.Expiration, MessageId: d.MessageId, Timestamp: d.Timestamp,
			Type: d.Type, UserId: d.UserId, AppId: d.AppId, Body: d.Body,
		}
		if !bytes.Equal(got.Body, pub.Body) {
			t.Errorf("%s: body differs (%d bytes, want %d)", how, len(got.Body), len(pub.Body))
		}
		got.Body, pub.Body = nil, nil
		if !reflect.DeepEqual(got, pub) {
			t.Errorf("%s: delivered\n%#v\nwant\n%#v", how, got, pub)
		}
		pub.Body = body
		if d.Exchange != "" || d.RoutingKey != q || d.Redelivered {
			t.Errorf("%s: exchange %q key %q redelivered %v", how, d.Exchange, d.RoutingKey, d.Redelivered)
		}
	}
	dvPublish(t, ch, "", q, pub)
	dvPublish(t, ch, "", q, pub)
	check("basic.get", dvGet(t, ch, q, true))
	check("basic.deliver", dvRecv(t, dvConsume(t, ch, q, "", true, nil)))
}

func TestDeliveryInvalidExpiration(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	q := dvDeclare(t, ch, "exp", nil)
	closed := dvNotifyClose(ch)
	dvPublish(t, ch, "", q, amqp091.Publishing{Expiration: "abc", Body: []byte("x")})
	dvAwaitClose(t, closed, 406, "PRECONDITION_FAILED - invalid expiration 'abc': no_integer")
}

func TestDeliveryUserIDMustMatch(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "uid", nil)
	closed := dvNotifyClose(ch)
	dvPublish(t, ch, "", q, amqp091.Publishing{UserId: "x", Body: []byte("x")})
	dvAwaitClose(t, closed, 406, "PRECONDITION_FAILED - user_id property set to 'x' but authenticated user was 'guest'")
	ch2 := dvChannel(t, c)
	dvWantReady(t, ch2, q, 0) // the refused message was not enqueued
}

// --- consuming ---

func TestDeliveryConsumeNoAck(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "noack", nil)
	want := dvNumbered("m", 5)
	dvPublishBodies(t, ch, q, want...)
	msgs := dvConsume(t, ch, q, "my-tag", true, nil)
	ds := dvRecvN(t, msgs, 5)
	dvWantBodies(t, "no-ack consumer", ds, want...)
	for i, d := range ds {
		if d.ConsumerTag != "my-tag" || d.DeliveryTag != uint64(i+1) || d.Redelivered {
			t.Fatalf("delivery %d: tag %q/%d redelivered %v", i, d.ConsumerTag, d.DeliveryTag, d.Redelivered)
		}
	}
	// Nothing is held for acknowledgement: closing the channel gives
	// nothing back.
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	dvWantReady(t, dvChannel(t, c), q, 0)
}

func TestDeliveryConsumerTagReuseClosesConnection(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "dup", nil)
	connClosed := c.NotifyClose(make(chan *amqp091.Error, 1))
	dvConsume(t, ch, q, "dup", false, nil)
	_, err := ch.Consume(q, "dup", false, false, false, false, nil)
	dvWantErr(t, err, 530, "NOT_ALLOWED - attempt to reuse consumer tag 'dup'")
	select {
	case e := <-connClosed:
		if e == nil || e.Code != 530 {
			t.Fatalf("connection closed with %v, want 530", e)
		}
	case <-time.After(dvWait):
		t.Fatal("connection not closed")
	}
}

func TestDeliveryExclusiveConsumer(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "excl", nil)
	if _, err := ch.Consume(q, "owner", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch2 := dvChannel(t, c)
	_, err := ch2.Consume(q, "second", false, false, false, false, nil)
	dvWantErr(t, err, 403, "ACCESS_REFUSED - queue 'excl' in vhost '/' in exclusive use")

	// Exclusive while another consumer exists.
	q2 := dvDeclare(t, ch, "shared", nil)
	dvConsume(t, ch, q2, "plain", false, nil)
	ch3 := dvChannel(t, c)
	_, err = ch3.Consume(q2, "greedy", false, true, false, false, nil)
	dvWantErr(t, err, 403, "ACCESS_REFUSED - queue 'shared' in vhost '/' in exclusive use")

	// Once the exclusive consumer cancels, others may consume.
	if err := ch.Cancel("owner", false); err != nil {
		t.Fatal(err)
	}
	ch4 := dvChannel(t, c)
	msgs := dvConsume(t, ch4, q, "after", true, nil)
	dvPublishBodies(t, ch4, q, "hello")
	if d := dvRecv(t, msgs); string(d.Body) != "hello" || d.ConsumerTag != "after" {
		t.Fatalf("got %q for %q", d.Body, d.ConsumerTag)
	}
}

func TestDeliveryConsumerPriorities(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "prio", nil)
	chLo := dvChannel(t, c)
	lo := dvConsume(t, chLo, q, "lo", false, amqp091.Table{"x-priority": int32(1)})
	chHi := dvChannel(t, c)
	if err := chHi.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	hi := dvConsume(t, chHi, q, "hi", false, amqp091.Table{"x-priority": int32(10)})

	// The high-priority consumer takes what its prefetch allows; the rest
	// goes to the low one although it has unlimited credit.
	dvPublishBodies(t, ch, q, "m0", "m1", "m2", "m3", "m4")
	dvWantBodies(t, "low", dvRecvN(t, lo, 3), "m2", "m3", "m4")
	his := dvRecvN(t, hi, 2)
	dvWantBodies(t, "high", his, "m0", "m1")

	// Credit back on the high one: the next message is its again.
	dvAck(t, his[0], false)
	dvPublishBodies(t, ch, q, "m5")
	dvWantBodies(t, "high after ack", dvRecvN(t, hi, 1), "m5")
	dvWantReady(t, ch, q, 0)
	select {
	case d := <-lo:
		t.Fatalf("low-priority consumer got %q", d.Body)
	default:
	}
}

func TestDeliveryRoundRobin(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "rr", nil)
	a := dvConsume(t, dvChannel(t, c), q, "a", true, nil)
	bb := dvConsume(t, dvChannel(t, c), q, "b", true, nil)
	dvPublishBodies(t, ch, q, dvNumbered("m", 10)...)
	dvWantBodies(t, "first consumer", dvRecvN(t, a, 5), "m0", "m2", "m4", "m6", "m8")
	dvWantBodies(t, "second consumer", dvRecvN(t, bb, 5), "m1", "m3", "m5", "m7", "m9")
}

func TestDeliveryCancelStopsDeliveries(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	q := dvDeclare(t, ch, "cancel", nil)
	msgs := dvConsume(t, ch, q, "c1", true, nil)
	dvPublishBodies(t, ch, q, "before")
	dvWantBodies(t, "before cancel", dvRecvN(t, msgs, 1), "before")
	if err := ch.Cancel("c1", false); err != nil {
		t.Fatal(err)
	}
	dvPublishBodies(t, ch, q, "after1", "after2")
	dvWantReady(t, ch, q, 2)
	select {
	case d, ok := <-msgs:
		if ok {
			t.Fatalf("delivery %q after cancel", d.Body)
		}
	case <-time.After(dvWait):
		t.Fatal("delivery channel not closed after cancel")
	}
}

func TestDeliveryServerCancelOnQueueDelete(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "doomed", nil)
	cancels := ch.NotifyCancel(make(chan string, 1))
	msgs := dvConsume(t, ch, q, "watcher", false, nil)
	if _, err := dvChannel(t, c).QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	select {
	case tag := <-cancels:
		if tag != "watcher" {
			t.Fatalf("cancelled %q, want watcher", tag)
		}
	case <-time.After(dvWait):
		t.Fatal("no basic.cancel from the server")
	}
	select {
	case _, ok := <-msgs:
		if ok {
			t.Fatal("delivery after server cancel")
		}
	case <-time.After(dvWait):
		t.Fatal("delivery channel not closed after server cancel")
	}
	// The channel is still usable.
	dvDeclare(t, ch, "other", nil)
}

func TestDeliveryOrder(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	q := dvDeclare(t, ch, "order", nil)
	const n = 1000
	msgs := dvConsume(t, ch, q, "c", false, nil)
	want := dvNumbered("m", n)
	dvPublishBodies(t, ch, q, want...)
	ds := dvRecvN(t, msgs, n)
	dvWantBodies(t, "order", ds, want...)
	for i, d := range ds {
		if d.DeliveryTag != uint64(i+1) || d.Redelivered {
			t.Fatalf("delivery %d: tag %d redelivered %v", i, d.DeliveryTag, d.Redelivered)
		}
	}
	dvAck(t, ds[n-1], true)
	dvWantReady(t, ch, q, 0)
}

// --- basic.get and acknowledgements ---

func TestDeliveryGet(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "get", nil)
	dvWantEmpty(t, ch, q)
	dvPublishBodies(t, ch, q, "a", "b", "c")
	for i, want := range []string{"a", "b", "c"} {
		d := dvGet(t, ch, q, false)
		if string(d.Body) != want || d.MessageCount != uint32(2-i) || d.DeliveryTag != uint64(i+1) {
			t.Fatalf("get %d: %q message_count %d tag %d, want %q %d %d", i, d.Body, d.MessageCount, d.DeliveryTag, want, 2-i, i+1)
		}
	}
	dvWantEmpty(t, ch, q)

	// no-ack get: nothing to give back when the channel closes, unlike the
	// three unacked ones above.
	ch2 := dvChannel(t, c)
	dvPublishBodies(t, ch2, q, "d")
	if d := dvGet(t, ch2, q, true); string(d.Body) != "d" {
		t.Fatalf("no-ack get: %q", d.Body)
	}
	ch2.Close()
	ch.Close()
	ch3 := dvChannel(t, c)
	dvWantReady(t, ch3, q, 3)
	dvWantBodies(t, "requeued gets", dvGetN(t, ch3, q, 3), "a", "b", "c")
}

func TestDeliveryAckRemoves(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "ack", nil)
	dvPublishBodies(t, ch, q, dvNumbered("m", 5)...)
	ds := dvGetN(t, ch, q, 5)
	dvAck(t, ds[1], false) // m1
	dvAck(t, ds[3], true)  // m0, m2, m3
	ch.Close()
	ch2 := dvChannel(t, c)
	got := dvGetN(t, ch2, q, 1)
	dvWantBodies(t, "left after acks", got, "m4")
	if !got[0].Redelivered {
		t.Fatal("requeued m4 not marked redelivered")
	}
	dvWantEmpty(t, ch2, q)
}

func TestDeliveryRequeueKeepsOrder(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	q := dvDeclare(t, ch, "requeue", nil)
	dvPublishBodies(t, ch, q, "m1", "m2", "m3", "m4")
	ds := dvGetN(t, ch, q, 3) // tags 1..3
	if err := ds[1].Reject(true); err != nil {
		t.Fatal(err)
	}
	if err := ds[2].Nack(true, true); err != nil { // settles 1 and 3
		t.Fatal(err)
	}
	got := dvGetN(t, ch, q, 4)
	dvWantBodies(t, "after requeue", got, "m1", "m2", "m3", "m4")
	for i, d := range got {
		if want := i < 3; d.Redelivered != want {
			t.Fatalf("%s: redelivered %v, want %v", d.Body, d.Redelivered, want)
		}
	}
}

func TestDeliveryRequeueFalseDiscards(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "discard", nil)
	dvPublishBodies(t, ch, q, "m1", "m2", "m3", "m4")
	ds := dvGetN(t, ch, q, 4)
	if err := ds[0].Reject(false); err != nil {
		t.Fatal(err)
	}
	if err := ds[2].Nack(true, false); err != nil { // m2, m3
		t.Fatal(err)
	}
	dvWantReady(t, ch, q, 0)
	ch.Close() // m4 is the only one still unacked
	ch2 := dvChannel(t, c)
	got := dvGetN(t, ch2, q, 1)
	dvWantBodies(t, "left", got, "m4")
	dvWantEmpty(t, ch2, q)
}

func TestDeliveryUnknownTag(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, _ := b.Channel(t)
	cases := []struct {
		name    string
		settle  func(ch *amqp091.Channel, d amqp091.Delivery) error
		reason  string
		settled int // acked before the failing one
	}{
		{"ack unknown", func(ch *amqp091.Channel, _ amqp091.Delivery) error { return ch.Ack(99, false) }, "PRECONDITION_FAILED - unknown delivery tag 99", 0},
		{"ack multiple unknown", func(ch *amqp091.Channel, _ amqp091.Delivery) error { return ch.Ack(99, true) }, "PRECONDITION_FAILED - unknown delivery tag 99", 0},
		{"nack unknown", func(ch *amqp091.Channel, _ amqp091.Delivery) error { return ch.Nack(7, false, true) }, "PRECONDITION_FAILED - unknown delivery tag 7", 0},
		{"reject unknown", func(ch *amqp091.Channel, _ amqp091.Delivery) error { return ch.Reject(8, false) }, "PRECONDITION_FAILED - unknown delivery tag 8", 0},
		{"double ack", func(ch *amqp091.Channel, d amqp091.Delivery) error {
			if err := d.Ack(false); err != nil {
				return err
			}
			return d.Ack(false)
		}, "PRECONDITION_FAILED - unknown delivery tag 1", 1},
		{"ack after multiple ack", func(ch *amqp091.Channel, d amqp091.Delivery) error {
			if err := ch.Ack(1, true); err != nil {
				return err
			}
			return ch.Nack(1, false, true)
		}, "PRECONDITION_FAILED - unknown delivery tag 1", 1},
		// RabbitMQ wants the tag of a multiple ack itself outstanding, even
		// when tags below it are (rabbit_channel:collect_acks).
		{"multiple ack of a settled tag", func(ch *amqp091.Channel, d amqp091.Delivery) error {
			if err := ch.Ack(2, false); err != nil {
				return err
			}
			return ch.Ack(2, true)
		}, "PRECONDITION_FAILED - unknown delivery tag 2", 1},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ch := dvChannel(t, c)
			q := dvDeclare(t, ch, fmt.Sprintf("unknown-%d", i), nil)
			dvPublishBodies(t, ch, q, "x", "y")
			d := dvGetN(t, ch, q, 2)[0] // tags 1 and 2 outstanding
			closed := dvNotifyClose(ch)
			if err := tc.settle(ch, d); err != nil {
				t.Fatal(err)
			}
			dvAwaitClose(t, closed, 406, tc.reason)
			// The failed ack settled nothing: closing gave both back.
			dvWantReady(t, dvChannel(t, c), q, 2-tc.settled)
		})
	}
}

func TestDeliveryRecoverRedelivers(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	q := dvDeclare(t, ch, "recover", nil)
	msgs := dvConsume(t, ch, q, "c", false, nil)
	dvPublishBodies(t, ch, q, "a", "b", "c")
	first := dvRecvN(t, msgs, 3)
	dvAck(t, first[1], false) // b is settled and stays gone
	if err := ch.Recover(true); err != nil {
		t.Fatal(err)
	}
	again := dvRecvN(t, msgs, 2)
	dvWantBodies(t, "after recover", again, "a", "c")
	for _, d := range again {
		if !d.Redelivered || d.DeliveryTag <= 3 {
			t.Fatalf("%s: redelivered %v tag %d, want redelivered with a new tag", d.Body, d.Redelivered, d.DeliveryTag)
		}
	}
	dvAck(t, again[1], true)
	dvWantReady(t, ch, q, 0)
}

func TestDeliveryChannelCloseRequeuesInOrder(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "close", nil)
	msgs := dvConsume(t, ch, q, "first", false, nil)
	want := dvNumbered("m", 5)
	dvPublishBodies(t, ch, q, want...)
	dvRecvN(t, msgs, 5)
	other := dvConsume(t, dvChannel(t, c), q, "second", false, nil)
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	got := dvRecvN(t, other, 5)
	dvWantBodies(t, "requeued to the other consumer", got, want...)
	for _, d := range got {
		if !d.Redelivered {
			t.Fatalf("%s not marked redelivered", d.Body)
		}
	}
}

// --- basic.qos ---

func TestDeliveryQosPerConsumer(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	q := dvDeclare(t, ch, "qos", nil)
	if err := ch.Qos(3, 0, false); err != nil {
		t.Fatal(err)
	}
	msgs := dvConsume(t, ch, q, "c", false, nil)
	dvPublishBodies(t, ch, q, dvNumbered("m", 10)...)
	ds := dvRecvN(t, msgs, 3)
	dvWantBodies(t, "within prefetch", ds, "m0", "m1", "m2")
	dvWantReady(t, ch, q, 7)
	dvAck(t, ds[0], false)
	dvWantBodies(t, "after one ack", dvRecvN(t, msgs, 1), "m3")
	dvWantReady(t, ch, q, 6)
	dvAck(t, ds[2], true) // m1, m2: two more
	dvWantBodies(t, "after two acks", dvRecvN(t, msgs, 2), "m4", "m5")
	dvWantReady(t, ch, q, 4)
}

func TestDeliveryQosGlobal(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	qa := dvDeclare(t, ch, "qa", nil)
	qb := dvDeclare(t, ch, "qb", nil)
	if err := ch.Qos(3, 0, true); err != nil {
		t.Fatal(err)
	}
	a := dvConsume(t, ch, qa, "a", false, nil)
	dvConsume(t, ch, qb, "b", false, nil)
	dvPublishBodies(t, ch, qa, dvNumbered("a", 5)...)
	dvPublishBodies(t, ch, qb, dvNumbered("b", 5)...)
	// The five to qa came first: they take the channel's three.
	dvWantBodies(t, "qa within the channel limit", dvRecvN(t, a, 3), "a0", "a1", "a2")
	if ra, rb := dvReady(t, ch, qa), dvReady(t, ch, qb); ra+rb != 7 {
		t.Fatalf("ready %d + %d, want 7 (3 in flight across the channel)", ra, rb)
	}
	// Raising the limit lets more flow at once.
	if err := ch.Qos(5, 0, true); err != nil {
		t.Fatal(err)
	}
	if ra, rb := dvReady(t, ch, qa), dvReady(t, ch, qb); ra+rb != 5 {
		t.Fatalf("after raising prefetch: ready %d + %d, want 5", ra, rb)
	}
}

func TestDeliveryQosAppliesToLaterConsumers(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	qa := dvDeclare(t, ch, "qa", nil)
	qb := dvDeclare(t, ch, "qb", nil)
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	dvConsume(t, ch, qa, "a", false, nil)
	if err := ch.Qos(3, 0, false); err != nil {
		t.Fatal(err)
	}
	dvConsume(t, ch, qb, "b", false, nil)
	dvPublishBodies(t, ch, qa, dvNumbered("a", 5)...)
	dvPublishBodies(t, ch, qb, dvNumbered("b", 5)...)
	dvWantReady(t, ch, qa, 4) // prefetch 1, unchanged by the later qos
	dvWantReady(t, ch, qb, 2) // prefetch 3
}

func TestDeliveryQosPrefetchSizeNotImplemented(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	err := ch.Qos(1, 1024, false)
	dvWantErr(t, err, 540, "NOT_IMPLEMENTED - prefetch_size!=0 (1024)")
}

// --- queue features ---

func TestDeliveryPriorityQueue(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	q := dvDeclare(t, ch, "pq", amqp091.Table{"x-max-priority": int32(10)})
	for _, m := range []struct {
		body string
		prio uint8
	}{{"p1", 1}, {"p5", 5}, {"p3", 3}, {"none", 0}, {"p200", 200}, {"p10", 10}, {"p5b", 5}} {
		dvPublish(t, ch, "", q, amqp091.Publishing{Priority: m.prio, Body: []byte(m.body)})
	}
	// Above the maximum counts as the maximum (arrival order between the
	// two at 10); no priority is 0.
	want := []string{"p200", "p10", "p5", "p5b", "p3", "p1", "none"}
	ds := dvGetN(t, ch, q, len(want))
	dvWantBodies(t, "priority order", ds, want...)
	if ds[0].Priority != 200 {
		t.Fatalf("priority property %d, want 200 as published", ds[0].Priority)
	}
	// Requeued, they come back in the same order.
	if err := ds[len(ds)-1].Nack(true, true); err != nil {
		t.Fatal(err)
	}
	dvWantBodies(t, "after requeue", dvGetN(t, ch, q, len(want)), want...)

	// And the simplest case of the spec: 1, 5, 3 → 5, 3, 1.
	q2 := dvDeclare(t, ch, "pq2", amqp091.Table{"x-max-priority": int32(10)})
	for _, p := range []uint8{1, 5, 3} {
		dvPublish(t, ch, "", q2, amqp091.Publishing{Priority: p, Body: []byte{'0' + p}})
	}
	msgs := dvConsume(t, ch, q2, "c", true, nil)
	dvWantBodies(t, "consumed by priority", dvRecvN(t, msgs, 3), "5", "3", "1")
}

func TestDeliverySingleActiveConsumer(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "sac", amqp091.Table{"x-single-active-consumer": true})
	chA := dvChannel(t, c)
	if err := chA.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	a := dvConsume(t, chA, q, "a", false, nil)
	chB := dvChannel(t, c)
	bb := dvConsume(t, chB, q, "b", false, nil)
	dvPublishBodies(t, ch, q, "m0", "m1", "m2")
	// Only the active consumer receives, even when it has no credit left.
	dvWantBodies(t, "active consumer", dvRecvN(t, a, 1), "m0")
	dvWantReady(t, ch, q, 2)

	// When it cancels, the next consumer takes over with what is ready.
	if err := chA.Cancel("a", false); err != nil {
		t.Fatal(err)
	}
	dvWantBodies(t, "next consumer", dvRecvN(t, bb, 2), "m1", "m2")
	dvWantReady(t, ch, q, 0)
}

// TestDeliverySingleActiveConsumerChannelClose: when the active consumer's
// channel closes, its unacked message goes back at the head and the next
// consumer receives everything in the original order.
func TestDeliverySingleActiveConsumerChannelClose(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "sac", amqp091.Table{"x-single-active-consumer": true})
	chA := dvChannel(t, c)
	if err := chA.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	a := dvConsume(t, chA, q, "a", false, nil)
	bb := dvConsume(t, dvChannel(t, c), q, "b", false, nil)
	dvPublishBodies(t, ch, q, "m0", "m1", "m2")
	dvWantBodies(t, "active consumer", dvRecvN(t, a, 1), "m0")
	if err := chA.Close(); err != nil {
		t.Fatal(err)
	}
	got := dvRecvN(t, bb, 3)
	dvWantBodies(t, "next consumer", got, "m0", "m1", "m2")
	if !got[0].Redelivered || got[1].Redelivered {
		t.Fatalf("redelivered flags %v %v, want true false", got[0].Redelivered, got[1].Redelivered)
	}
}

// TestDeliverySingleActiveConsumerPausedClose: ready messages held back
// by a paused active consumer go to the next one when its channel closes,
// even though it had nothing unacked to give back.
func TestDeliverySingleActiveConsumerPausedClose(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "sac", amqp091.Table{"x-single-active-consumer": true})
	chA := dvChannel(t, c)
	dvConsume(t, chA, q, "a", true, nil)
	if err := chA.Flow(false); err != nil {
		t.Fatal(err)
	}
	bb := dvConsume(t, dvChannel(t, c), q, "b", true, nil)
	dvPublishBodies(t, ch, q, "m0", "m1")
	dvWantReady(t, ch, q, 2)
	if err := chA.Close(); err != nil {
		t.Fatal(err)
	}
	dvWantBodies(t, "next consumer", dvRecvN(t, bb, 2), "m0", "m1")
}

// --- sender-selected distribution ---

func TestDeliveryCCAndBCCRouting(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	for _, k := range []string{"ka", "kb", "kc", "kd"} {
		q := dvDeclare(t, ch, "q-"+k, nil)
		if err := ch.QueueBind(q, k, "amq.direct", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	dvPublish(t, ch, "amq.direct", "ka", amqp091.Publishing{
		Headers: amqp091.Table{
			"CC":    []any{"kb", "ka"}, // ka again: still one copy
			"BCC":   []any{"kc"},
			"other": "kept",
		},
		Body: []byte("hello"),
	})
	for _, k := range []string{"ka", "kb", "kc"} {
		q := "q-" + k
		dvWantReady(t, ch, q, 1)
		d := dvGet(t, ch, q, true)
		if string(d.Body) != "hello" || d.RoutingKey != "ka" || d.Exchange != "amq.direct" {
			t.Fatalf("%s: %q via %q/%q", q, d.Body, d.Exchange, d.RoutingKey)
		}
		want := amqp091.Table{"CC": []any{"kb", "ka"}, "other": "kept"}
		if !reflect.DeepEqual(d.Headers, want) {
			t.Fatalf("%s: headers %v, want %v (BCC stripped, the rest intact)", q, d.Headers, want)
		}
	}
	dvWantReady(t, ch, "q-kd", 0)
}

func TestDeliveryCCNonStringElementsIgnored(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	for _, k := range []string{"ka", "kb", "kc", "kd"} {
		q := dvDeclare(t, ch, "q-"+k, nil)
		if err := ch.QueueBind(q, k, "amq.direct", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	// RabbitMQ routes on longstr elements only (rabbit_basic:header_routes):
	// a binary "kc" or an integer routes nowhere.
	dvPublish(t, ch, "amq.direct", "ka", amqp091.Publishing{
		Headers: amqp091.Table{
			"CC":  []any{int32(1), "kb", true, []byte("kc"), nil},
			"BCC": []any{[]byte("kd"), int64(5)},
		},
		Body: []byte("x"),
	})
	for q, want := range map[string]int{"q-ka": 1, "q-kb": 1, "q-kc": 0, "q-kd": 0} {
		dvWantReady(t, ch, q, want)
	}
}

func TestDeliveryCCNotAnArray(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, _ := b.Channel(t)
	for _, tc := range []struct {
		header string
		value  any
		reason string
	}{
		// amqp091 sends a Go string as 'S', which RabbitMQ calls longstr.
		{"CC", "kb", `PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"CC",longstr}`},
		{"CC", int32(3), `PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"CC",signedint}`},
		{"BCC", amqp091.Table{"k": "v"}, `PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"BCC",table}`},
	} {
		t.Run(fmt.Sprintf("%s=%T", tc.header, tc.value), func(t *testing.T) {
			ch := dvChannel(t, c)
			q := dvDeclare(t, ch, "cc-bad", nil)
			closed := dvNotifyClose(ch)
			dvPublish(t, ch, "", q, amqp091.Publishing{Headers: amqp091.Table{tc.header: tc.value}, Body: []byte("x")})
			dvAwaitClose(t, closed, 406, tc.reason)
			dvWantReady(t, dvChannel(t, c), q, 0)
		})
	}
}

// --- direct reply-to ---

func TestDeliveryDirectReplyTo(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, server := b.Channel(t)
	rpc := dvDeclare(t, server, "rpc", nil)
	requests := dvConsume(t, server, rpc, "server", false, nil)

	_, client := b.Channel(t)
	replies := dvConsume(t, client, "amq.rabbitmq.reply-to", "client", true, nil)
	dvPublish(t, client, "", rpc, amqp091.Publishing{
		ReplyTo: "amq.rabbitmq.reply-to", CorrelationId: "req-1", Body: []byte("ping"),
	})

	req := dvRecv(t, requests)
	if !strings.HasPrefix(req.ReplyTo, "amq.rabbitmq.reply-to.") || len(req.ReplyTo) <= len("amq.rabbitmq.reply-to.") {
		t.Fatalf("server sees reply_to %q, want a rewritten amq.rabbitmq.reply-to.… address", req.ReplyTo)
	}
	if req.CorrelationId != "req-1" || string(req.Body) != "ping" {
		t.Fatalf("request %q correlation %q", req.Body, req.CorrelationId)
	}
	dvAck(t, req, false)
	dvPublish(t, server, "", req.ReplyTo, amqp091.Publishing{CorrelationId: req.CorrelationId, Body: []byte("pong")})

	rep := dvRecv(t, replies)
	if string(rep.Body) != "pong" || rep.CorrelationId != "req-1" || rep.ConsumerTag != "client" || rep.RoutingKey != req.ReplyTo {
		t.Fatalf("reply %q correlation %q consumer %q key %q", rep.Body, rep.CorrelationId, rep.ConsumerTag, rep.RoutingKey)
	}

	// Once the requester has gone, a mandatory reply is returned.
	client.Close()
	returns := server.NotifyReturn(make(chan amqp091.Return, 1))
	if err := server.PublishWithContext(dvCtx(t), "", req.ReplyTo, true, false, amqp091.Publishing{Body: []byte("late")}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || string(r.Body) != "late" {
			t.Fatalf("return %d %q", r.ReplyCode, r.Body)
		}
	case <-time.After(dvWait):
		t.Fatal("reply to a gone requester not returned")
	}
}

func TestDeliveryDirectReplyToErrors(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	_, err := ch.Consume("amq.rabbitmq.reply-to", "c", false, false, false, false, nil)
	dvWantErr(t, err, 406, "PRECONDITION_FAILED - reply consumer cannot acknowledge")

	ch2 := dvChannel(t, c)
	q := dvDeclare(t, ch2, "rpc", nil)
	closed := dvNotifyClose(ch2)
	dvPublish(t, ch2, "", q, amqp091.Publishing{ReplyTo: "amq.rabbitmq.reply-to", Body: []byte("x")})
	dvAwaitClose(t, closed, 406, "PRECONDITION_FAILED - fast reply consumer does not exist")
	dvWantReady(t, dvChannel(t, c), q, 0)
}

// --- channel.flow ---

func TestDeliveryChannelFlow(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	q := dvDeclare(t, ch, "flow", nil)
	consumerCh := dvChannel(t, c)
	msgs := dvConsume(t, consumerCh, q, "c", true, nil)
	if err := consumerCh.Flow(false); err != nil {
		t.Fatal(err)
	}
	dvPublishBodies(t, ch, q, "a", "b", "c")
	dvWantReady(t, ch, q, 3) // paused: nothing delivered
	if err := consumerCh.Flow(true); err != nil {
		t.Fatal(err)
	}
	dvWantBodies(t, "after flow resumed", dvRecvN(t, msgs, 3), "a", "b", "c")
}

// --- the wire: what amqp091 hides ---

// dvWire is a minimal AMQP client over brokerd's own codec, for what
// amqp091-go hides: the exact property bytes and header order,
// server-generated consumer tags, and a consumer that stops reading its
// socket. Channel 1 is open after dvDialWire.
type dvWire struct {
	t        testing.TB
	nc       net.Conn
	fr       *amqp.FrameReader
	frameMax uint32
}

func dvDialWire(t testing.TB, addr string, rcvBuf int) *dvWire {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if rcvBuf > 0 {
		if err := nc.(*net.TCPConn).SetReadBuffer(rcvBuf); err != nil {
			t.Fatal(err)
		}
	}
	w := &dvWire{t: t, nc: nc, fr: amqp.NewFrameReader(nc)}
	w.write(amqp.ProtocolHeader[:])
	dvExpectMethod[*amqp.ConnectionStart](w, 0)
	w.send(0, &amqp.ConnectionStartOk{
		ClientProperties: amqp.Table{{Key: "capabilities", Value: amqp.Table{{Key: "consumer_cancel_notify", Value: true}}}},
		Mechanism:        "PLAIN",
		Response:         "\x00guest\x00guest",
		Locale:           "en_US",
	})
	tune := dvExpectMethod[*amqp.ConnectionTune](w, 0)
	w.frameMax = tune.FrameMax
	w.send(0, &amqp.ConnectionTuneOk{ChannelMax: tune.ChannelMax, FrameMax: tune.FrameMax})
	w.fr.SetMaxFrameSize(tune.FrameMax)
	w.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
	dvExpectMethod[*amqp.ConnectionOpenOk](w, 0)
	w.send(1, &amqp.ChannelOpen{})
	dvExpectMethod[*amqp.ChannelOpenOk](w, 1)
	return w
}

func (w *dvWire) write(b []byte) {
	w.t.Helper()
	w.nc.SetWriteDeadline(time.Now().Add(dvWait))
	if _, err := w.nc.Write(b); err != nil {
		w.t.Fatalf("write: %v", err)
	}
}

func (w *dvWire) send(ch uint16, m amqp.Method) {
	w.t.Helper()
	w.write(amqp.AppendMethodFrame(nil, ch, m))
}

func (w *dvWire) publish(ch uint16, m *amqp.BasicPublish, rawProps, body []byte) {
	w.t.Helper()
	buf := amqp.AppendMethodFrame(nil, ch, m)
	buf = amqp.AppendHeaderFrame(buf, ch, 60, uint64(len(body)), rawProps)
	buf = amqp.AppendBodyFrames(buf, ch, body, w.frameMax)
	w.write(buf)
}

// frame returns the next non-heartbeat frame; its payload is a copy.
func (w *dvWire) frame() amqp.Frame {
	w.t.Helper()
	for {
		w.nc.SetReadDeadline(time.Now().Add(dvWait))
		f, err := w.fr.ReadFrame()
		if err != nil {
			w.t.Fatalf("read frame: %v", err)
		}
		if f.Type == amqp.FrameHeartbeat {
			continue
		}
		f.Payload = slices.Clone(f.Payload)
		return f
	}
}

func (w *dvWire) method(ch uint16) amqp.Method {
	w.t.Helper()
	f := w.frame()
	if f.Type != amqp.FrameMethod || f.Channel != ch {
		w.t.Fatalf("frame type %d on channel %d, want a method on channel %d", f.Type, f.Channel, ch)
	}
	m, err := amqp.DecodeMethod(f.Payload)
	if err != nil {
		w.t.Fatalf("decode method: %v", err)
	}
	return m
}

func dvExpectMethod[M amqp.Method](w *dvWire, ch uint16) M {
	w.t.Helper()
	m := w.method(ch)
	got, ok := m.(M)
	if !ok {
		w.t.Fatalf("got %s (%+v), want %T", m.Name(), m, got)
	}
	return got
}

// content reads a content method with its header and body.
func (w *dvWire) content(ch uint16) (m amqp.Method, rawProps, body []byte) {
	w.t.Helper()
	m = w.method(ch)
	if !m.HasContent() {
		w.t.Fatalf("got %s (%+v), want a content method", m.Name(), m)
	}
	f := w.frame()
	if f.Type != amqp.FrameHeader {
		w.t.Fatalf("frame type %d after %s, want a content header", f.Type, m.Name())
	}
	_, size, raw, err := amqp.ParseContentHeader(f.Payload)
	if err != nil {
		w.t.Fatal(err)
	}
	body = make([]byte, 0, size)
	for uint64(len(body)) < size {
		f := w.frame()
		if f.Type != amqp.FrameBody {
			w.t.Fatalf("frame type %d in a body", f.Type)
		}
		body = append(body, f.Payload...)
	}
	return m, raw, body
}

func dvEncodeProps(t testing.TB, p amqp.Properties) []byte {
	t.Helper()
	raw, err := p.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestDeliveryPropertiesBitForBit(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	w := dvDialWire(t, b.Addr, 0)
	w.send(1, &amqp.QueueDeclare{Queue: "bits"})
	dvExpectMethod[*amqp.QueueDeclareOk](w, 1)

	headers := amqp.Table{
		{Key: "z-first", Value: "s"},
		{Key: "dup", Value: int32(1)},
		{Key: "b", Value: int8(-1)},
		{Key: "B", Value: uint8(255)},
		{Key: "s", Value: int16(-2)},
		{Key: "u", Value: uint16(65535)},
		{Key: "I", Value: int32(-3)},
		{Key: "i", Value: uint32(1 << 31)},
		{Key: "l", Value: int64(-4)},
		{Key: "f", Value: float32(0.5)},
		{Key: "d", Value: float64(1e300)},
		{Key: "D", Value: amqp.Decimal{Scale: 3, Value: -7}},
		{Key: "x", Value: []byte{0, 0xff}},
		{Key: "A", Value: []any{}},
		{Key: "A2", Value: []any{"a", int64(1), []any{nil}, amqp.Table{{Key: "k", Value: false}}}},
		{Key: "T", Value: amqp.Timestamp(1700000000)},
		{Key: "F", Value: amqp.Table{}},
		{Key: "V", Value: nil},
		{Key: "t", Value: true},
		{Key: "dup", Value: "second"},
		{Key: "a-last", Value: ""},
	}
	props := amqp.Properties{
		Flags: amqp.FlagContentType | amqp.FlagContentEncoding | amqp.FlagHeaders | amqp.FlagDeliveryMode |
			amqp.FlagPriority | amqp.FlagCorrelationID | amqp.FlagReplyTo | amqp.FlagMessageID |
			amqp.FlagTimestamp | amqp.FlagType | amqp.FlagUserID | amqp.FlagAppID | amqp.FlagClusterID,
		ContentType: "text/plain", ContentEncoding: "", Headers: headers, DeliveryMode: 1, Priority: 0,
		CorrelationID: "c", ReplyTo: "r", MessageID: "m", Timestamp: 1 << 40, Type: "t", UserID: "guest",
		AppID: "a", ClusterID: "cl",
	}
	raw := dvEncodeProps(t, props)
	body := []byte("bits")
	w.publish(1, &amqp.BasicPublish{RoutingKey: "bits"}, raw, body)
	w.publish(1, &amqp.BasicPublish{RoutingKey: "bits"}, raw, body)

	w.send(1, &amqp.BasicGet{Queue: "bits", NoAck: true})
	m, gotRaw, gotBody := w.content(1)
	if _, ok := m.(*amqp.BasicGetOk); !ok {
		t.Fatalf("got %s, want basic.get-ok", m.Name())
	}
	if !bytes.Equal(gotRaw, raw) || !bytes.Equal(gotBody, body) {
		t.Fatalf("basic.get-ok properties\n%x\nwant\n%x", gotRaw, raw)
	}

	w.send(1, &amqp.BasicConsume{Queue: "bits", NoAck: true})
	ok := dvExpectMethod[*amqp.BasicConsumeOk](w, 1)
	m, gotRaw, gotBody = w.content(1)
	d, isDeliver := m.(*amqp.BasicDeliver)
	if !isDeliver || d.ConsumerTag != ok.ConsumerTag {
		t.Fatalf("got %+v, want basic.deliver for %q", m, ok.ConsumerTag)
	}
	if !bytes.Equal(gotRaw, raw) || !bytes.Equal(gotBody, body) {
		t.Fatalf("basic.deliver properties\n%x\nwant\n%x", gotRaw, raw)
	}
}

func TestDeliveryServerGeneratedConsumerTag(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	w := dvDialWire(t, b.Addr, 0)
	w.send(1, &amqp.QueueDeclare{Queue: "tags"})
	dvExpectMethod[*amqp.QueueDeclareOk](w, 1)
	tags := map[string]bool{}
	for range 2 {
		w.send(1, &amqp.BasicConsume{Queue: "tags", NoAck: true})
		ok := dvExpectMethod[*amqp.BasicConsumeOk](w, 1)
		rest, found := strings.CutPrefix(ok.ConsumerTag, "amq.ctag-")
		if !found || len(rest) != 22 {
			t.Fatalf("server-generated tag %q, want amq.ctag- and 22 characters", ok.ConsumerTag)
		}
		tags[ok.ConsumerTag] = true
	}
	if len(tags) != 2 {
		t.Fatalf("two consumers got the same tag: %v", tags)
	}
	w.publish(1, &amqp.BasicPublish{RoutingKey: "tags"}, dvEncodeProps(t, amqp.Properties{}), []byte("x"))
	m, _, _ := w.content(1)
	if d, ok := m.(*amqp.BasicDeliver); !ok || !tags[d.ConsumerTag] {
		t.Fatalf("delivery %+v not for a generated tag %v", m, tags)
	}
}

// TestDeliveryBCCStrippedInPlace checks on the wire that stripping BCC
// keeps every other header, in its order, and the other properties.
func TestDeliveryBCCStrippedInPlace(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	w := dvDialWire(t, b.Addr, 0)
	for _, q := range []string{"to", "cc", "bcc"} {
		w.send(1, &amqp.QueueDeclare{Queue: q})
		dvExpectMethod[*amqp.QueueDeclareOk](w, 1)
	}
	sent := amqp.Properties{
		Flags:       amqp.FlagContentType | amqp.FlagHeaders | amqp.FlagCorrelationID | amqp.FlagAppID,
		ContentType: "text/plain",
		Headers: amqp.Table{
			{Key: "h1", Value: "one"},
			{Key: "BCC", Value: []any{"bcc"}},
			{Key: "h2", Value: int32(2)},
			{Key: "CC", Value: []any{"cc"}},
			{Key: "h0", Value: true},
		},
		CorrelationID: "corr",
		AppID:         "app",
	}
	want := sent
	want.Headers = amqp.Table{
		{Key: "h1", Value: "one"},
		{Key: "h2", Value: int32(2)},
		{Key: "CC", Value: []any{"cc"}},
		{Key: "h0", Value: true},
	}
	wantRaw := dvEncodeProps(t, want)
	w.publish(1, &amqp.BasicPublish{RoutingKey: "to"}, dvEncodeProps(t, sent), []byte("body"))
	for _, q := range []string{"to", "cc", "bcc"} {
		w.send(1, &amqp.BasicGet{Queue: q, NoAck: true})
		m, raw, body := w.content(1)
		g, ok := m.(*amqp.BasicGetOk)
		if !ok || g.RoutingKey != "to" || string(body) != "body" {
			t.Fatalf("%s: %+v body %q", q, m, body)
		}
		if !bytes.Equal(raw, wantRaw) {
			got, _ := amqp.DecodeProperties(raw)
			t.Fatalf("%s: properties %+v\nwant %+v", q, got, want)
		}
	}
}

// TestDeliverySlowConsumerLosesNothing: a no-ack consumer that stops
// reading its socket must not make the broker drop messages. The broker
// stops writing at its outbound high-water mark and keeps the rest queued.
func TestDeliverySlowConsumerLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 30 MiB")
	}
	b := brokertest.Start(t, brokertest.Config{})
	w := dvDialWire(t, b.Addr, 64<<10)
	w.send(1, &amqp.QueueDeclare{Queue: "slow"})
	dvExpectMethod[*amqp.QueueDeclareOk](w, 1)
	w.send(1, &amqp.BasicConsume{Queue: "slow", ConsumerTag: "slow", NoAck: true})
	dvExpectMethod[*amqp.BasicConsumeOk](w, 1)
	// From here the consumer reads nothing until everything is published.

	_, pub := b.Channel(t)
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	// About 8 MiB fits in the broker's outbound queue and the socket
	// buffers here; the rest must wait in the queue.
	const n = 30_000
	confirms := pub.NotifyPublish(make(chan amqp091.Confirmation, n))
	body := make([]byte, 1024)
	for i := range n {
		binary.BigEndian.PutUint32(body, uint32(i))
		dvPublish(t, pub, "", "slow", amqp091.Publishing{Body: body})
	}
	for i := range n {
		select {
		case c := <-confirms:
			if !c.Ack || c.DeliveryTag != uint64(i+1) {
				t.Fatalf("confirm %+v, want ack %d", c, i+1)
			}
		case <-time.After(dvWait):
			t.Fatalf("confirm %d missing", i+1)
		}
	}
	// Back-pressure held the rest in the queue rather than in memory
	// bound for the socket.
	if ready := dvReady(t, pub, "slow"); ready == 0 {
		t.Fatalf("all %d messages left the queue for a consumer that reads nothing", n)
	}

	for i := range n {
		m, _, got := w.content(1)
		d, ok := m.(*amqp.BasicDeliver)
		if !ok {
			t.Fatalf("got %s", m.Name())
		}
		if len(got) != len(body) || binary.BigEndian.Uint32(got) != uint32(i) || d.DeliveryTag != uint64(i+1) {
			t.Fatalf("delivery %d: message %d (%d bytes), tag %d", i, binary.BigEndian.Uint32(got), len(got), d.DeliveryTag)
		}
	}
	dvWantReady(t, pub, "slow", 0)
}
