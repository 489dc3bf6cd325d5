package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// fixedTime is the timestamp written into message properties and headers so
// that fixtures do not change from run to run.
var fixedTime = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// getMessages are the messages publish-get puts into the queue read by the
// /get fixtures, in queue order: one with every property and every field-table
// value type, one binary body (not UTF-8), one with an x-death table shaped as
// RabbitMQ writes it, and one long text body for truncate.
func getMessages(user string) []amqp.Publishing {
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	long := strings.Repeat("0123456789", 20)
	return []amqp.Publishing{
		{
			ContentType:     "text/plain",
			ContentEncoding: "utf-8",
			DeliveryMode:    amqp.Persistent,
			Priority:        5,
			CorrelationId:   "corr-1",
			ReplyTo:         "fx.replies",
			Expiration:      "3600000",
			MessageId:       "msg-1",
			Timestamp:       fixedTime,
			Type:            "order.created",
			UserId:          user,
			AppId:           "make-fixtures",
			Headers: amqp.Table{
				"string":    "s",
				"int8":      int8(-8),
				"int16":     int16(-16),
				"int32":     int32(-32),
				"int64":     int64(-64),
				"float32":   float32(1.5),
				"float64":   float64(2.25),
				"bool":      true,
				"bytes":     []byte{0, 1, 2, 255},
				"decimal":   amqp.Decimal{Scale: 2, Value: 12345},
				"timestamp": fixedTime,
				"table":     amqp.Table{"a": int32(1), "b": "two"},
				"array":     []interface{}{int32(1), "two", true},
				"void":      nil,
			},
			Body: []byte("hello, world"),
		},
		{
			ContentType:  "application/octet-stream",
			DeliveryMode: amqp.Persistent,
			MessageId:    "msg-2",
			Body:         binary,
		},
		{
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			MessageId:    "msg-3",
			Headers: amqp.Table{
				"x-death": []interface{}{amqp.Table{
					"count":        int64(1),
					"reason":       "rejected",
					"queue":        "fx.work",
					"time":         fixedTime,
					"exchange":     "fx.direct",
					"routing-keys": []interface{}{"work"},
				}},
				"x-first-death-exchange": "fx.direct",
				"x-first-death-queue":    "fx.work",
				"x-first-death-reason":   "rejected",
			},
			Body: []byte(`{"order":42}`),
		},
		{
			ContentType:  "text/plain",
			DeliveryMode: amqp.Transient,
			MessageId:    "msg-4",
			Body:         []byte(long),
		},
	}
}

func publishGet(args []string) error {
	fs := flag.NewFlagSet("publish-get", flag.ExitOnError)
	url := fs.String("url", "amqp://guest:guest@127.0.0.1:5690/", "AMQP URL, vhost included")
	queue := fs.String("queue", "fx.get", "queue to publish to through the default exchange")
	_ = fs.Parse(args)

	uri, err := amqp.ParseURI(*url)
	if err != nil {
		return fmt.Errorf("parse url: %w", err)
	}
	conn, err := amqp.Dial(*url)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	for i, m := range getMessages(uri.Username) {
		if err := publishConfirmed(ch, "", *queue, false, m); err != nil {
			return fmt.Errorf("publish message %d: %w", i+1, err)
		}
	}
	return nil
}

// publishConfirmed publishes one message on ch in confirm mode and waits for
// the broker's ack, so that the message is in its queues when it returns.
func publishConfirmed(ch *amqp.Channel, exchange, key string, mandatory bool, m amqp.Publishing) error {
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm select: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, mandatory, false, m)
	if err != nil {
		return fmt.Errorf("publish to %q with key %q: %w", exchange, key, err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("wait for confirm: %w", err)
	}
	if !ok {
		return errNacked
	}
	return nil
}

var errNacked = errors.New("publish nacked by the broker")

// closeReport is what hold prints when the server closes its connection.
type closeReport struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Server  bool   `json:"server"`
	Recover bool   `json:"recover"`
}

func hold(args []string) error {
	fs := flag.NewFlagSet("hold", flag.ExitOnError)
	url := fs.String("url", "amqp://guest:guest@127.0.0.1:5690/", "AMQP URL, vhost included")
	name := fs.String("name", "fixtures-consumer", "client-provided connection_name")
	exchange := fs.String("exchange", "", "exchange to publish to")
	key := fs.String("key", "", "routing key to publish with")
	queue := fs.String("queue", "", "queue to consume")
	n := fs.Int("publish", 5, "messages to publish before consuming")
	prefetch := fs.Int("prefetch", 2, "basic.qos prefetch count of the consumer")
	wait := fs.Duration("wait", 5*time.Minute, "how long to wait for the server to close the connection")
	_ = fs.Parse(args)

	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(*name)
	conn, err := amqp.DialConfig(*url, amqp.Config{Properties: props})
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))

	pub, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open publisher channel: %w", err)
	}
	for i := 0; i < *n; i++ {
		m := amqp.Publishing{
			ContentType:  "text/plain",
			DeliveryMode: amqp.Persistent,
			MessageId:    fmt.Sprintf("work-%d", i+1),
			Body:         []byte(fmt.Sprintf("work item %d", i+1)),
		}
		if err := publishConfirmed(pub, *exchange, *key, true, m); err != nil {
			return fmt.Errorf("publish work item %d: %w", i+1, err)
		}
	}

	sub, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open consumer channel: %w", err)
	}
	if err := sub.Qos(*prefetch, 0, false); err != nil {
		return fmt.Errorf("basic.qos: %w", err)
	}
	deliveries, err := sub.Consume(*queue, "fx-consumer", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %q: %w", *queue, err)
	}
	timeout := time.After(*wait)
	for got := 0; got < *prefetch; got++ {
		select {
		case _, ok := <-deliveries:
			if !ok {
				return errors.New("deliveries closed before prefetch was filled")
			}
		case <-timeout:
			return fmt.Errorf("waited %s for %d deliveries", *wait, *prefetch)
		}
	}
	fmt.Println("ready")

	select {
	case e := <-closed:
		if e == nil {
			return errors.New("connection closed without an error")
		}
		out, err := json.Marshal(closeReport{Code: e.Code, Reason: e.Reason, Server: e.Server, Recover: e.Recover})
		if err != nil {
			return fmt.Errorf("encode close report: %w", err)
		}
		fmt.Println(string(out))
		return nil
	case <-timeout:
		return fmt.Errorf("server did not close the connection within %s", *wait)
	}
}
