// Tests of message properties and headers: round trips and refusals.

package broker_test

// Tests of message properties and headers: every field round-trips, bit
// for bit on the wire, and invalid expiration and user-id are refused.

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
)

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
	ch := b.Session(t, brokertest.NoConfirm)
	q := ch.Declare("props", nil)
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
	ch.Publish("", q, pub)
	ch.Publish("", q, pub)
	check("basic.get", ch.GetNoAck(q))
	check("basic.deliver", dvRecv(t, dvConsume(t, ch, q, "", true, nil)))
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

func TestDeliveryInvalidExpiration(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	q := ch.Declare("exp", nil)
	closed := dvNotifyClose(ch)
	ch.Publish("", q, amqp091.Publishing{Expiration: "abc", Body: []byte("x")})
	dvAwaitClose(t, closed, 406, "PRECONDITION_FAILED - invalid expiration 'abc': no_integer")
}

func TestDeliveryUserIDMustMatch(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("uid", nil)
	closed := dvNotifyClose(ch)
	ch.Publish("", q, amqp091.Publishing{UserId: "x", Body: []byte("x")})
	dvAwaitClose(t, closed, 406, "PRECONDITION_FAILED - user_id property set to 'x' but authenticated user was 'guest'")
	ch2 := brokertest.NewSession(t, c, brokertest.NoConfirm)
	ch2.WantReady(q, 0) // the refused message was not enqueued
}
