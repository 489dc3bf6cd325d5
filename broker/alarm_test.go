// Tests of resource alarms: publishers blocked and released, heartbeats and shutdown while blocked.

package broker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func TestAlarmBlocksPublishers(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	pubConn, pub := b.Channel(t)
	blocked := pubConn.NotifyBlocked(make(chan amqp091.Blocking, 4))
	_, cons := b.Channel(t)
	if _, err := pub.QueueDeclare("alarm-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, body := range []string{"before-1", "before-2"} {
		if err := pub.PublishWithContext(ctx, "", "alarm-q", false, false, amqp091.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	// Make sure both are enqueued before the alarm (a round trip on pub).
	if _, err := pub.QueueDeclarePassive("alarm-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}

	b.Broker.SetAlarm(broker.AlarmMemory, true)
	if got := b.Broker.Alarms(); !slices.Equal(got, []string{"memory"}) {
		t.Fatalf("Alarms() = %v", got)
	}
	if err := pub.PublishWithContext(ctx, "", "alarm-q", false, false, amqp091.Publishing{Body: []byte("during")}); err != nil {
		t.Fatal(err)
	}
	select {
	case bl := <-blocked:
		if !bl.Active || bl.Reason != "low on memory" {
			t.Fatalf("blocking = %+v, want active, reason low on memory", bl)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection.blocked for a publisher during the alarm")
	}

	// A consumer keeps working during the alarm: it gets and acks what was
	// queued before, but not the held publish.
	msgs, err := cons.Consume("alarm-q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"before-1", "before-2"} {
		select {
		case d := <-msgs:
			if string(d.Body) != want {
				t.Fatalf("got %q, want %q", d.Body, want)
			}
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("consumer got nothing during the alarm (wanted %q)", want)
		}
	}
	select {
	case d := <-msgs:
		t.Fatalf("publish held by the alarm was delivered: %q", d.Body)
	case <-time.After(200 * time.Millisecond): // time is the point: nothing may pass
	}

	b.Broker.SetAlarm(broker.AlarmMemory, false)
	select {
	case bl := <-blocked:
		if bl.Active {
			t.Fatalf("blocking = %+v after the alarm cleared", bl)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection.unblocked after the alarm cleared")
	}
	select {
	case d := <-msgs:
		if string(d.Body) != "during" {
			t.Fatalf("after the alarm got %q, want during", d.Body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held publish not delivered after the alarm cleared")
	}
	if got := b.Broker.Alarms(); len(got) != 0 {
		t.Fatalf("Alarms() after clearing = %v", got)
	}
}

// A broker shutting down does not wait for an alarm to clear.
func TestAlarmShutdownReleasesBlockedPublisher(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	conn, ch := b.Channel(t)
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	blocked := conn.NotifyBlocked(make(chan amqp091.Blocking, 1))
	b.Broker.SetAlarm(broker.AlarmDisk, true)
	if err := ch.PublishWithContext(context.Background(), "", "nowhere", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case bl := <-blocked:
		if bl.Reason != "low on disk" {
			t.Fatalf("reason %q", bl.Reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not blocked")
	}
	done := make(chan struct{})
	go func() { b.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("shutdown hangs on a publisher blocked by an alarm")
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != 320 {
			t.Fatalf("close = %v, want 320", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("client not told of the shutdown")
	}
}

// A publisher blocked by an alarm is not read from, so it cannot be heard
// heartbeating: the heartbeat monitor pauses while the connection is
// blocked, as RabbitMQ's does, and an alarm that outlasts two heartbeat
// intervals does not cost the publisher its connection when it clears.
func TestAlarmPausesHeartbeatMonitor(t *testing.T) {
	t.Parallel()
	const hb = time.Second
	b := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{Heartbeat: hb}})
	conn, err := amqp091.DialConfig(b.URL, amqp091.Config{Heartbeat: hb})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if conn.Config.Heartbeat != hb {
		t.Fatalf("negotiated heartbeat %v, want %v", conn.Config.Heartbeat, hb)
	}
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	blocked := conn.NotifyBlocked(make(chan amqp091.Blocking, 2))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("hb-alarm-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}

	b.Broker.SetAlarm(broker.AlarmMemory, true)
	ctx := context.Background()
	held, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "hb-alarm-q", false, false, amqp091.Publishing{Body: []byte("held")})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case bl := <-blocked:
		if !bl.Active {
			t.Fatalf("blocking = %+v, want active", bl)
		}
	case e := <-closed:
		t.Fatalf("connection closed before it was blocked: %v", e)
	case <-time.After(prWait):
		t.Fatal("publisher not blocked")
	}
	// Time is the point: the reader stays parked for more than the 2.25
	// intervals after which a silent client is dropped.
	select {
	case e := <-closed:
		t.Fatalf("connection closed while blocked: %v", e)
	case <-time.After(3 * hb):
	}
	b.Broker.SetAlarm(broker.AlarmMemory, false)
	select {
	case bl := <-blocked:
		if bl.Active {
			t.Fatalf("blocking = %+v after the alarm cleared", bl)
		}
	case e := <-closed:
		t.Fatalf("connection closed when the alarm cleared: %v", e)
	case <-time.After(prWait):
		t.Fatal("no connection.unblocked after the alarm cleared")
	}

	// The connection is alive: the held publish is confirmed, a round trip
	// sees it queued, and a new publish is confirmed too.
	wctx, cancel := context.WithTimeout(ctx, prWait)
	defer cancel()
	if ok, err := held.WaitContext(wctx); !ok || err != nil {
		t.Fatalf("held publish: confirmed %v, err %v", ok, err)
	}
	q, err := ch.QueueDeclarePassive("hb-alarm-q", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("round trip after the alarm: %v", err)
	}
	if q.Messages != 1 {
		t.Fatalf("queue holds %d messages, want the held one", q.Messages)
	}
	after, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "hb-alarm-q", false, false, amqp091.Publishing{Body: []byte("after")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := after.WaitContext(wctx); !ok || err != nil {
		t.Fatalf("publish after the alarm: confirmed %v, err %v", ok, err)
	}
	if conn.IsClosed() {
		t.Fatal("connection closed")
	}
}
