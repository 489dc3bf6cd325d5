// Tests of sender-selected distribution: the CC and BCC headers.

package broker_test

// Tests of sender-selected distribution: the CC and BCC headers route
// copies, malformed ones are ignored, and BCC is stripped from what
// consumers see, every other header in place.

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func TestDeliveryCCAndBCCRouting(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	for _, k := range []string{"ka", "kb", "kc", "kd"} {
		q := ch.Declare("q-"+k, nil)
		if err := ch.QueueBind(q, k, "amq.direct", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	ch.Publish("amq.direct", "ka", amqp091.Publishing{
		Headers: amqp091.Table{
			"CC":    []any{"kb", "ka"}, // ka again: still one copy
			"BCC":   []any{"kc"},
			"other": "kept",
		},
		Body: []byte("hello"),
	})
	for _, k := range []string{"ka", "kb", "kc"} {
		q := "q-" + k
		ch.WantReady(q, 1)
		d := ch.GetNoAck(q)
		if string(d.Body) != "hello" || d.RoutingKey != "ka" || d.Exchange != "amq.direct" {
			t.Fatalf("%s: %q via %q/%q", q, d.Body, d.Exchange, d.RoutingKey)
		}
		want := amqp091.Table{"CC": []any{"kb", "ka"}, "other": "kept"}
		if !reflect.DeepEqual(d.Headers, want) {
			t.Fatalf("%s: headers %v, want %v (BCC stripped, the rest intact)", q, d.Headers, want)
		}
	}
	ch.WantReady("q-kd", 0)
}

func TestDeliveryCCNonStringElementsIgnored(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	for _, k := range []string{"ka", "kb", "kc", "kd"} {
		q := ch.Declare("q-"+k, nil)
		if err := ch.QueueBind(q, k, "amq.direct", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	// RabbitMQ routes on longstr elements only (rabbit_basic:header_routes):
	// a binary "kc" or an integer routes nowhere.
	ch.Publish("amq.direct", "ka", amqp091.Publishing{
		Headers: amqp091.Table{
			"CC":  []any{int32(1), "kb", true, []byte("kc"), nil},
			"BCC": []any{[]byte("kd"), int64(5)},
		},
		Body: []byte("x"),
	})
	for q, want := range map[string]int{"q-ka": 1, "q-kb": 1, "q-kc": 0, "q-kd": 0} {
		ch.WantReady(q, want)
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
			ch := brokertest.NewSession(t, c, brokertest.NoConfirm)
			q := ch.Declare("cc-bad", nil)
			closed := dvNotifyClose(ch)
			ch.Publish("", q, amqp091.Publishing{Headers: amqp091.Table{tc.header: tc.value}, Body: []byte("x")})
			dvAwaitClose(t, closed, 406, tc.reason)
			brokertest.NewSession(t, c, brokertest.NoConfirm).WantReady(q, 0)
		})
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
