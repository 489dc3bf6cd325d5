// Tests of queue declaration: exclusive, auto-delete, server-named, passive, arguments.

package broker_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func TestQueueDeclareExclusive(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	owner := ch.Conn
	if _, err := ch.QueueDeclare("ex", false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	ch.PublishBodies("ex", "m")
	// The owner may use it from another channel.
	if got := brokertest.NewSession(t, owner).Drain("ex"); len(got) != 1 || got[0] != "m" {
		t.Fatalf("owner's second channel got %q", got)
	}

	other := b.Dial(t)
	const locked = "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'ex' in vhost '/'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
	for name, op := range map[string]func(ch *amqp091.Channel) error{
		"declare": func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("ex", false, false, false, false, nil)
			return err
		},
		"declare exclusive": func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("ex", false, false, true, false, nil)
			return err
		},
		"passive": func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclarePassive("ex", false, false, true, false, nil)
			return err
		},
		"consume": func(ch *amqp091.Channel) error {
			_, err := ch.Consume("ex", "", false, false, false, false, nil)
			return err
		},
		"get": func(ch *amqp091.Channel) error {
			_, _, err := ch.Get("ex", false)
			return err
		},
		"bind": func(ch *amqp091.Channel) error { return ch.QueueBind("ex", "k", "amq.direct", false, nil) },
		"purge": func(ch *amqp091.Channel) error {
			_, err := ch.QueuePurge("ex", false)
			return err
		},
		"delete": func(ch *amqp091.Channel) error {
			_, err := ch.QueueDelete("ex", false, false, false)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) { rqFails(t, other, 405, locked, op) })
	}
	// Anyone may publish to it.
	brokertest.NewSession(t, other).PublishBodies("ex", "from-other")
	if q, err := rqPassiveQueue(owner, "ex"); err != nil || q.Messages != 1 {
		t.Fatalf("passive declare by owner: %+v, %v", q, err)
	}

	// The queue goes with its connection. RabbitMQ deletes exclusive
	// queues asynchronously after connection.close-ok, and so may brokerd:
	// retry the passive declare (each try is a round trip) for a bounded
	// time.
	if err := owner.Close(); err != nil {
		t.Fatal(err)
	}
	var gone error
	brokertest.Eventually(t, "the exclusive queue to go with its connection", func() error {
		_, gone = rqPassiveQueue(other, "ex")
		if gone == nil {
			return errors.New("a passive declare still finds it")
		}
		if ae := (*amqp091.Error)(nil); errors.As(gone, &ae) && ae.Code == 404 {
			return nil
		}
		return gone
	})
	rqWantErr(t, gone, 404, "NOT_FOUND - no queue 'ex' in vhost '/'")
	// The name is free again.
	if _, err := brokertest.NewSession(t, other).QueueDeclare("ex", false, false, true, false, nil); err != nil {
		t.Fatalf("redeclare after owner left: %v", err)
	}
}

func TestQueueAutoDelete(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	if _, err := ch.QueueDeclare("ad", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// Not deleted before its first consumer, even after basic.get.
	ch.PublishBodies("ad", "m")
	ch.Drain("ad")
	if _, err := rqPassiveQueue(conn, "ad"); err != nil {
		t.Fatalf("auto-delete queue gone before any consumer: %v", err)
	}
	cch := brokertest.NewSession(t, conn)
	if _, err := cch.Consume("ad", "c1", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cch.Consume("ad", "c2", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := cch.Cancel("c1", false); err != nil {
		t.Fatal(err)
	}
	q, err := rqPassiveQueue(conn, "ad")
	if err != nil || q.Consumers != 1 {
		t.Fatalf("after cancelling one of two consumers: %+v, %v", q, err)
	}
	if err := cch.Cancel("c2", false); err != nil {
		t.Fatal(err)
	}
	_, err = rqPassiveQueue(conn, "ad")
	rqWantErr(t, err, 404, "NOT_FOUND - no queue 'ad' in vhost '/'")

	// Closing the consumer's channel counts as cancelling.
	if _, err := ch.QueueDeclare("ad2", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	cch2 := brokertest.NewSession(t, conn)
	if _, err := cch2.Consume("ad2", "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := cch2.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = rqPassiveQueue(conn, "ad2")
	rqWantErr(t, err, 404, "NOT_FOUND - no queue 'ad2' in vhost '/'")
}

func TestQueueServerNamed(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	q1, err := ch.QueueDeclare("", false, false, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	q2, err := ch.QueueDeclare("", false, false, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []amqp091.Queue{q1, q2} {
		if !strings.HasPrefix(q.Name, "amq.gen-") || len(q.Name) != len("amq.gen-")+22 {
			t.Errorf("server-generated name %q", q.Name)
		}
	}
	if q1.Name == q2.Name {
		t.Fatalf("two declares got the same name %q", q1.Name)
	}
	if _, err := rqPassiveQueue(conn, q1.Name); err != nil {
		t.Fatalf("passive declare of %s: %v", q1.Name, err)
	}
	// The name is usable for routing.
	ch.PublishBodies(q1.Name, "m")
	rqExpect(t, ch, map[string][]string{q1.Name: {"m"}, q2.Name: nil})
}

func TestQueueLastDeclaredName(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	rqFails(t, conn, 404, "NOT_FOUND - no previously declared queue", func(ch *amqp091.Channel) error {
		_, err := ch.QueuePurge("", false)
		return err
	})
	ch.Declare("first", nil)
	ch.Declare("last", nil)
	// Empty queue name: the last queue declared on this channel. With an
	// empty routing key too, the key is the queue's name.
	if err := ch.QueueBind("", "", "amq.direct", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("", "k", "amq.direct", false, nil); err != nil {
		t.Fatal(err)
	}
	ch.Publish("amq.direct", "last", amqp091.Publishing{Body: []byte("by-name-key")})
	ch.Publish("amq.direct", "k", amqp091.Publishing{Body: []byte("by-k")})
	ch.Publish("amq.direct", "", amqp091.Publishing{Body: []byte("by-empty-key")})
	rqExpect(t, ch, map[string][]string{"last": {"by-name-key", "by-k"}, "first": nil})
	ch.PublishBodies("last", "p1")
	ch.PublishBodies("last", "p2")
	if n, err := ch.QueuePurge("", false); err != nil || n != 2 {
		t.Fatalf("purge of last declared = %d, %v; want 2", n, err)
	}
	ch.Publish("amq.direct", "k", amqp091.Publishing{Body: []byte("again")})
	d, ok, err := ch.Channel.Get("", true)
	if err != nil || !ok || string(d.Body) != "again" {
		t.Fatalf("get from last declared: %q %v %v", d.Body, ok, err)
	}
	ch.PublishBodies("last", "x")
	if n, err := ch.QueueDelete("", false, false, false); err != nil || n != 1 {
		t.Fatalf("delete of last declared = %d, %v; want 1", n, err)
	}
	if _, err := rqPassiveQueue(conn, "first"); err != nil {
		t.Fatalf("first queue affected: %v", err)
	}
	// A passive declare also sets it.
	ch2 := brokertest.NewSession(t, conn)
	if _, err := ch2.QueueDeclarePassive("first", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch2.PublishBodies("first", "f")
	if got := ch2.Drain(""); len(got) != 1 || got[0] != "f" {
		t.Fatalf("get from passively declared queue: %q", got)
	}
}

func TestQueueDeclarePassive(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	_, err := rqPassiveQueue(conn, "q")
	rqWantErr(t, err, 404, "NOT_FOUND - no queue 'q' in vhost '/'")
	ch.Declare("q", nil)
	for _, b := range []string{"m1", "m2", "m3"} {
		ch.PublishBodies("q", b)
	}
	cch := brokertest.NewSession(t, conn)
	if err := cch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := cch.Consume("q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-deliveries:
		if string(d.Body) != "m1" {
			t.Fatalf("first delivery %q", d.Body)
		}
	case <-time.After(brokertest.Wait):
		t.Fatal("no delivery")
	}
	// The count is of ready messages: the unacked one is not in it.
	q, err := ch.QueueDeclarePassive("q", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Name != "q" || q.Messages != 2 || q.Consumers != 1 {
		t.Fatalf("passive declare = %+v, want 2 messages, 1 consumer", q)
	}
	// A non-passive redeclare reports the same counts.
	q, err = ch.QueueDeclare("q", false, false, false, false, nil)
	if err != nil || q.Messages != 2 || q.Consumers != 1 {
		t.Fatalf("redeclare = %+v, %v", q, err)
	}
}

func TestQueueRedeclareEquivalence(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	declare := func(name string, durable, autoDelete bool, args amqp091.Table) func(ch *amqp091.Channel) error {
		return func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare(name, durable, autoDelete, false, false, args)
			return err
		}
	}
	const pf = "PRECONDITION_FAILED - "

	ch.Declare("plain", nil)
	rqFails(t, conn, 406, pf+"inequivalent arg 'durable' for queue 'plain' in vhost '/': received 'true' but current is 'false'",
		declare("plain", true, false, nil))
	rqFails(t, conn, 406, pf+"inequivalent arg 'auto_delete' for queue 'plain' in vhost '/': received 'true' but current is 'false'",
		declare("plain", false, true, nil))

	if err := declare("ttl", false, false, amqp091.Table{"x-message-ttl": int64(1000)})(ch.Channel); err != nil {
		t.Fatal(err)
	}
	// Integer types are one class: int32 1000 is the same as int64 1000;
	// arguments the queue type doesn't know are ignored.
	for _, args := range []amqp091.Table{
		{"x-message-ttl": int64(1000)},
		{"x-message-ttl": int32(1000)},
		{"x-message-ttl": int16(1000)},
		{"x-message-ttl": int64(1000), "x-foo": "bar"},
	} {
		if err := declare("ttl", false, false, args)(ch.Channel); err != nil {
			t.Fatalf("redeclare with %v: %v", args, err)
		}
	}
	for _, c := range []struct {
		args   amqp091.Table
		reason string
	}{
		{amqp091.Table{"x-message-ttl": int64(2000)},
			"inequivalent arg 'x-message-ttl' for queue 'ttl' in vhost '/': received the value '2000' of type 'long' but current is the value '1000' of type 'long'"},
		{amqp091.Table{"x-message-ttl": int32(2000)},
			"inequivalent arg 'x-message-ttl' for queue 'ttl' in vhost '/': received the value '2000' of type 'signedint' but current is the value '1000' of type 'long'"},
		{amqp091.Table{"x-message-ttl": "1000"},
			"inequivalent arg 'x-message-ttl' for queue 'ttl' in vhost '/': received the value '1000' of type 'longstr' but current is the value '1000' of type 'long'"},
		{nil,
			"inequivalent arg 'x-message-ttl' for queue 'ttl' in vhost '/': received none but current is the value '1000' of type 'long'"},
		{amqp091.Table{"x-message-ttl": int64(1000), "x-expires": int32(5000)},
			"inequivalent arg 'x-expires' for queue 'ttl' in vhost '/': received the value '5000' of type 'signedint' but current is none"},
	} {
		rqFails(t, conn, 406, pf+c.reason, declare("ttl", false, false, c.args))
	}
	// The failed redeclares changed nothing.
	if err := declare("ttl", false, false, amqp091.Table{"x-message-ttl": int64(1000)})(ch.Channel); err != nil {
		t.Fatal(err)
	}
}

func TestQueueReservedName(t *testing.T) {
	conn := brokertest.Start(t, brokertest.Config{}).Dial(t)
	rqFails(t, conn, 403, "ACCESS_REFUSED - queue name 'amq.q' contains reserved prefix 'amq.*'", func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("amq.q", false, false, false, false, nil)
		return err
	})
	_, err := rqPassiveQueue(conn, "amq.q")
	rqWantErr(t, err, 404, "NOT_FOUND - no queue 'amq.q' in vhost '/'")
}

func TestQueueArgumentValidation(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	const prefix = "PRECONDITION_FAILED - invalid arg '"
	const rs = "' for queue 'v' in vhost '/'"
	quorum := amqp091.Table{"x-queue-type": "quorum"}
	with := func(base amqp091.Table, k string, v any) amqp091.Table {
		t := amqp091.Table{k: v}
		for bk, bv := range base {
			t[bk] = bv
		}
		return t
	}
	for _, c := range []struct {
		name   string
		args   amqp091.Table
		reason string // "" = accepted
	}{
		{"ttl negative", amqp091.Table{"x-message-ttl": int64(-10)}, prefix + "x-message-ttl" + rs + ": {value_negative,-10}"},
		{"ttl string", amqp091.Table{"x-message-ttl": "1000"}, prefix + "x-message-ttl" + rs + ": expected integer, got longstr"},
		{"ttl float", amqp091.Table{"x-message-ttl": 1000.0}, prefix + "x-message-ttl" + rs + ": expected integer, got double"},
		{"ttl too large", amqp091.Table{"x-message-ttl": int64(315360000001)}, prefix + "x-message-ttl" + rs + ": {value_too_large,315360000001}"},
		{"ttl zero", amqp091.Table{"x-message-ttl": int32(0)}, ""},
		{"ttl max", amqp091.Table{"x-message-ttl": int64(315360000000)}, ""},
		{"expires zero", amqp091.Table{"x-expires": int32(0)}, prefix + "x-expires" + rs + ": {value_zero,0}"},
		{"expires negative", amqp091.Table{"x-expires": int64(-1)}, prefix + "x-expires" + rs + ": {value_negative,-1}"},
		{"expires string", amqp091.Table{"x-expires": "1"}, prefix + "x-expires" + rs + ": expected integer, got longstr"},
		{"expires one", amqp091.Table{"x-expires": int32(1)}, ""},
		{"max-length negative", amqp091.Table{"x-max-length": int32(-5)}, prefix + "x-max-length" + rs + ": {value_negative,-5}"},
		{"max-length string", amqp091.Table{"x-max-length": "5"}, prefix + "x-max-length" + rs + ": {unacceptable_type,longstr}"},
		{"max-length-bytes negative", amqp091.Table{"x-max-length-bytes": int64(-1)}, prefix + "x-max-length-bytes" + rs + ": {value_negative,-1}"},
		{"max-length zero", amqp091.Table{"x-max-length": uint8(0)}, ""},
		{"overflow bad", amqp091.Table{"x-overflow": "bogus"}, prefix + "x-overflow" + rs + ": invalid_overflow"},
		{"overflow int", amqp091.Table{"x-overflow": int32(1)}, prefix + "x-overflow" + rs + ": {unacceptable_type,signedint}"},
		{"overflow ok", amqp091.Table{"x-overflow": "reject-publish-dlx"}, ""},
		{"dlrk without dlx", amqp091.Table{"x-dead-letter-routing-key": "k"}, prefix + "x-dead-letter-routing-key" + rs + ": routing_key_but_no_dlx_defined"},
		{"dlrk with dlx", amqp091.Table{"x-dead-letter-routing-key": "k", "x-dead-letter-exchange": ""}, ""},
		{"dlx not a string", amqp091.Table{"x-dead-letter-exchange": int32(1)}, "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'v' in vhost '/'"},
		{"unknown x-foo", amqp091.Table{"x-foo": int32(1), "foo": "bar"}, ""},
		{"max-priority on quorum", with(quorum, "x-max-priority", int32(5)), prefix + "x-max-priority" + rs + " of queue type rabbit_quorum_queue"},
		{"queue-mode on quorum", with(quorum, "x-queue-mode", "lazy"), prefix + "x-queue-mode" + rs + " of queue type rabbit_quorum_queue"},
		{"max-length on quorum", with(quorum, "x-max-length", int32(-5)), prefix + "x-max-length" + rs + ": {value_negative,-5}"},
		{"max-priority on classic", amqp091.Table{"x-max-priority": int32(5)}, ""},
		{"quorum", quorum, ""},
		{"unknown type", amqp091.Table{"x-queue-type": "bogus"}, prefix + "x-queue-type" + rs + ": unknown queue type 'bogus'"},
		{"stream", amqp091.Table{"x-queue-type": "stream"}, prefix + "x-queue-type" + rs + ": stream queues are not supported by brokerd; use a classic or quorum queue"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ch := ch.With(t)
			decl := func(ch *amqp091.Channel) error {
				_, err := ch.QueueDeclare("v", true, false, false, false, c.args)
				return err
			}
			if c.reason != "" {
				rqFails(t, conn, 406, c.reason, decl)
				_, err := rqPassiveQueue(conn, "v")
				rqWantErr(t, err, 404, "NOT_FOUND - no queue 'v' in vhost '/'")
				return
			}
			if err := decl(ch.Channel); err != nil {
				t.Fatalf("declare with %v: %v", c.args, err)
			}
			if _, err := ch.QueueDelete("v", false, false, false); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestQueueQuorumProperties(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	quorum := amqp091.Table{"x-queue-type": "quorum"}
	for _, c := range []struct {
		durable, autoDelete, exclusive bool
		prop                           string
	}{
		{false, false, false, "non-durable"},
		{true, true, false, "auto-delete"},
		{true, false, true, "exclusive-owner"},
	} {
		rqFails(t, conn, 406, "PRECONDITION_FAILED - invalid property '"+c.prop+"' for queue 'qq' in vhost '/'", func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("qq", c.durable, c.autoDelete, c.exclusive, false, quorum)
			return err
		})
	}
	if _, err := ch.QueueDeclare("qq", true, false, false, false, quorum); err != nil {
		t.Fatal(err)
	}
	// The queue type is part of equivalence.
	rqFails(t, conn, 406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'qq' in vhost '/': received none but current is the value 'quorum' of type 'longstr'",
		func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("qq", true, false, false, false, nil)
			return err
		})
	ch.PublishBodies("qq", "m")
	rqExpect(t, ch, map[string][]string{"qq": {"m"}})
}

func TestQueueBindUnbind(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	ch.Declare("q", nil)
	ch.DeclareExchange("x", "direct", nil)
	rqFails(t, conn, 404, "NOT_FOUND - no queue 'nq' in vhost '/'", func(ch *amqp091.Channel) error {
		return ch.QueueBind("nq", "k", "x", false, nil)
	})
	rqFails(t, conn, 404, "NOT_FOUND - no exchange 'nx' in vhost '/'", func(ch *amqp091.Channel) error {
		return ch.QueueBind("q", "k", "nx", false, nil)
	})

	// A duplicate bind is the same binding: one unbind removes it.
	ch.Bind("q", "k", "x", nil)
	ch.Bind("q", "k", "x", nil)
	ch.Publish("x", "k", amqp091.Publishing{Body: []byte("bound")})
	if err := ch.QueueUnbind("q", "k", "x", nil); err != nil {
		t.Fatal(err)
	}
	ch.Publish("x", "k", amqp091.Publishing{Body: []byte("unbound")})
	rqExpect(t, ch, map[string][]string{"q": {"bound"}})

	// Binding arguments are part of the binding's identity.
	ch.Bind("q", "k", "x", amqp091.Table{"a": int32(1)})
	if err := ch.QueueUnbind("q", "k", "x", amqp091.Table{"a": int64(1)}); err != nil {
		t.Fatal(err)
	}
	ch.Publish("x", "k", amqp091.Publishing{Body: []byte("still-bound")})
	if err := ch.QueueUnbind("q", "k", "x", amqp091.Table{"a": int32(1)}); err != nil {
		t.Fatal(err)
	}
	ch.Publish("x", "k", amqp091.Publishing{Body: []byte("gone")})
	rqExpect(t, ch, map[string][]string{"q": {"still-bound"}})

	// Unbinding what isn't bound is fine.
	if err := ch.QueueUnbind("q", "never", "x", nil); err != nil {
		t.Fatalf("unbind of a missing binding: %v", err)
	}
}

func TestQueuePurge(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	ch.Declare("q", nil)
	for _, b := range []string{"m1", "m2", "m3", "m4"} {
		ch.PublishBodies("q", b)
	}
	gch := brokertest.NewSession(t, conn)
	var tags []uint64
	for _, want := range []string{"m1", "m2"} {
		d, ok, err := gch.Channel.Get("q", false)
		if err != nil || !ok || string(d.Body) != want {
			t.Fatalf("get = %q %v %v, want %q", d.Body, ok, err, want)
		}
		tags = append(tags, d.DeliveryTag)
	}
	n, err := ch.QueuePurge("q", false)
	if err != nil || n != 2 {
		t.Fatalf("purge = %d, %v; want 2 (the ready messages only)", n, err)
	}
	if q, err := rqPassiveQueue(conn, "q"); err != nil || q.Messages != 0 {
		t.Fatalf("after purge: %+v, %v", q, err)
	}
	// The unacked messages survived the purge: one acks, the other comes
	// back when rejected with requeue.
	if err := gch.Ack(tags[0], false); err != nil {
		t.Fatal(err)
	}
	if err := gch.Nack(tags[1], false, true); err != nil {
		t.Fatal(err)
	}
	d, ok, err := gch.Channel.Get("q", true)
	if err != nil || !ok || string(d.Body) != "m2" || !d.Redelivered {
		t.Fatalf("after requeue get = %q ok=%v redelivered=%v err=%v; want redelivered m2", d.Body, ok, d.Redelivered, err)
	}
	if got := gch.Drain("q"); got != nil {
		t.Fatalf("left in queue: %q", got)
	}
	// Purging an empty queue returns 0; a missing one is 404.
	if n, err := ch.QueuePurge("q", false); err != nil || n != 0 {
		t.Fatalf("purge empty = %d, %v", n, err)
	}
	rqFails(t, conn, 404, "NOT_FOUND - no queue 'nq' in vhost '/'", func(ch *amqp091.Channel) error {
		_, err := ch.QueuePurge("nq", false)
		return err
	})
}

func TestQueueDelete(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	ch.Declare("q", nil)
	ch.Bind("q", "k", "amq.direct", nil)
	for _, b := range []string{"m1", "m2", "m3"} {
		ch.PublishBodies("q", b)
	}
	rqFails(t, conn, 406, "PRECONDITION_FAILED - queue 'q' in vhost '/' not empty", func(ch *amqp091.Channel) error {
		_, err := ch.QueueDelete("q", false, true, false)
		return err
	})

	cch := brokertest.NewSession(t, conn)
	cancels := cch.NotifyCancel(make(chan string, 1))
	if err := cch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := cch.Consume("q", "ctag", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-deliveries:
	case <-time.After(brokertest.Wait):
		t.Fatal("no delivery")
	}
	rqFails(t, conn, 406, "PRECONDITION_FAILED - queue 'q' in vhost '/' in use", func(ch *amqp091.Channel) error {
		_, err := ch.QueueDelete("q", true, false, false)
		return err
	})

	n, err := ch.QueueDelete("q", false, false, false)
	if err != nil || n != 2 {
		t.Fatalf("delete = %d, %v; want 2 ready messages", n, err)
	}
	// The consumer was told (basic.cancel precedes delete-ok on the wire).
	select {
	case tag := <-cancels:
		if tag != "ctag" {
			t.Fatalf("cancelled %q", tag)
		}
	default:
		t.Fatal("consumer got no basic.cancel")
	}
	// Its bindings went with it: a new queue of the same name is unbound.
	ch.Declare("q", nil)
	ch.Publish("amq.direct", "k", amqp091.Publishing{Body: []byte("to-old-binding")})
	rqExpect(t, ch, map[string][]string{"q": nil})

	// Deleting a missing queue is not an error.
	if n, err := ch.QueueDelete("missing", false, false, false); err != nil || n != 0 {
		t.Fatalf("delete missing = %d, %v", n, err)
	}
	// if-empty and if-unused pass on an empty, unused queue.
	if _, err := ch.QueueDelete("q", true, true, false); err != nil {
		t.Fatalf("conditional delete of an empty unused queue: %v", err)
	}
	_, err = rqPassiveQueue(conn, "q")
	rqWantErr(t, err, 404, "NOT_FOUND - no queue 'q' in vhost '/'")
}

// rqDeliveryProps is the part of a delivery that must round-trip.
func rqDeliveryProps(d amqp091.Delivery) amqp091.Delivery {
	return amqp091.Delivery{
		Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId,
		ReplyTo: d.ReplyTo, Expiration: d.Expiration, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId, AppId: d.AppId,
		Exchange: d.Exchange, RoutingKey: d.RoutingKey, Body: d.Body,
	}
}

func TestDurabilityAcrossRestart(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	dqArgs := amqp091.Table{"x-max-length": int64(100), "x-foo": "bar", "x-single-active-consumer": false}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ch.ExchangeDeclare("dx", "topic", true, false, false, false, amqp091.Table{"alternate-exchange": "dae"}))
	must(ch.ExchangeDeclare("dae", "fanout", true, false, false, false, nil))
	must(ch.ExchangeDeclare("dx2", "direct", true, false, false, false, nil))
	must(ch.ExchangeDeclare("dint", "fanout", true, false, true, false, nil))
	must(ch.ExchangeDeclare("tx", "fanout", false, false, false, false, nil))
	for _, q := range []struct {
		name               string
		durable, exclusive bool
		args               amqp091.Table
	}{
		{"dq", true, false, dqArgs},
		{"daeq", true, false, nil},
		{"dq2", true, false, nil},
		{"tq", false, false, nil},
		{"eq", true, true, nil},
	} {
		_, err := ch.QueueDeclare(q.name, q.durable, false, q.exclusive, false, q.args)
		must(err)
	}
	ch.Bind("dq", "a.#", "dx", amqp091.Table{"bk": int32(1)})
	ch.Bind("daeq", "", "dae", nil)
	ch.BindExchange("dx2", "b.*", "dx", nil)
	ch.BindExchange("dint", "b.*", "dx", nil)
	ch.Bind("dq2", "b.x", "dx2", nil)
	ch.Bind("dq", "d", "amq.direct", nil)
	ch.Bind("dq2", "", "tx", nil) // not durable: tx isn't
	ch.Bind("tq", "d", "amq.direct", nil)

	full := amqp091.Publishing{
		Headers: amqp091.Table{
			"s": "str", "i8": int8(-3), "u8": uint8(200), "i16": int16(-300), "u16": uint16(60000),
			"i32": int32(-7), "u32": uint32(4000000000), "i64": int64(1 << 40),
			"f32": float32(2.5), "f64": 1.25, "b": true, "dec": amqp091.Decimal{Scale: 2, Value: 12345},
			"bin": []byte{0, 1, 2, 255}, "arr": []any{"x", int32(1), []any{false}},
			"tbl": amqp091.Table{"k": "v", "n": int64(2)}, "void": nil, "ts": time.Unix(1700000000, 0),
		},
		ContentType: "application/json", ContentEncoding: "gzip", DeliveryMode: amqp091.Persistent,
		Priority: 7, CorrelationId: "corr", ReplyTo: "reply-q", Expiration: "3600000",
		MessageId: "mid-1", Timestamp: time.Unix(1700000001, 0), Type: "kind", UserId: "guest",
		AppId: "app", Body: []byte("durable body \x00\xff"),
	}
	ch.Publish("", "dq", full)
	ch.Publish("", "dq", amqp091.Publishing{Body: []byte("transient"), DeliveryMode: amqp091.Transient})
	ch.Publish("", "tq", amqp091.Publishing{Body: []byte("in-transient-queue"), DeliveryMode: amqp091.Persistent})
	ch.Publish("", "eq", amqp091.Publishing{Body: []byte("in-exclusive-queue"), DeliveryMode: amqp091.Persistent})
	ch.Publish("dx", "b.x", amqp091.Publishing{Body: []byte("held"), DeliveryMode: amqp091.Persistent})
	// Held unacked over the restart: it comes back.
	if d, ok, err := ch.Channel.Get("dq2", false); err != nil || !ok || string(d.Body) != "held" {
		t.Fatalf("get held = %q %v %v", d.Body, ok, err)
	}

	b.Restart()
	conn := b.Dial(t)
	ch = brokertest.NewSession(t, conn)

	for name, want := range map[string]bool{"dx": true, "dae": true, "dx2": true, "dint": true, "tx": false, "amq.topic": true} {
		if got := rqExchangeExists(t, conn, name); got != want {
			t.Errorf("exchange %q exists = %v after restart, want %v", name, got, want)
		}
	}
	for name, want := range map[string]int{"dq": 1, "daeq": 0, "dq2": 1} {
		q, err := rqPassiveQueue(conn, name)
		if err != nil || q.Messages != want {
			t.Errorf("queue %q after restart: %+v, %v; want %d messages", name, q, err, want)
		}
	}
	for _, name := range []string{"tq", "eq"} {
		_, err := rqPassiveQueue(conn, name)
		rqWantErr(t, err, 404, "NOT_FOUND - no queue '"+name+"' in vhost '/'")
	}

	d, ok, err := ch.Channel.Get("dq", true)
	if err != nil || !ok {
		t.Fatalf("get from dq: %v %v", ok, err)
	}
	if d.Redelivered {
		t.Error("a recovered message that was never delivered is marked redelivered")
	}
	want := rqDeliveryProps(amqp091.Delivery{
		Headers: full.Headers, ContentType: full.ContentType, ContentEncoding: full.ContentEncoding,
		DeliveryMode: full.DeliveryMode, Priority: full.Priority, CorrelationId: full.CorrelationId,
		ReplyTo: full.ReplyTo, Expiration: full.Expiration, MessageId: full.MessageId,
		Timestamp: full.Timestamp, Type: full.Type, UserId: full.UserId, AppId: full.AppId,
		Exchange: "", RoutingKey: "dq", Body: full.Body,
	})
	if got := rqDeliveryProps(d); !reflect.DeepEqual(got, want) {
		t.Errorf("recovered message differs\n got %#v\nwant %#v", got, want)
	}
	d, ok, err = ch.Channel.Get("dq2", true)
	if err != nil || !ok || string(d.Body) != "held" || !d.Redelivered || d.Exchange != "dx" || d.RoutingKey != "b.x" {
		t.Errorf("held message after restart: %q redelivered=%v exchange=%q key=%q ok=%v err=%v", d.Body, d.Redelivered, d.Exchange, d.RoutingKey, ok, err)
	}

	// Bindings between durable ends survived, with their arguments.
	ch.Publish("dx", "a.z", amqp091.Publishing{Body: []byte("via-dx")})
	ch.Publish("dx", "b.x", amqp091.Publishing{Body: []byte("via-dx2")})
	ch.Publish("dx", "zzz", amqp091.Publishing{Body: []byte("via-ae")})
	ch.Publish("amq.direct", "d", amqp091.Publishing{Body: []byte("via-amq.direct")})
	rqPublishFails(t, conn, "dint", "", 403, "ACCESS_REFUSED - cannot publish to internal exchange 'dint' in vhost '/'")
	must(ch.ExchangeDeclare("tx", "fanout", false, false, false, false, nil))
	ch.Publish("tx", "", amqp091.Publishing{Body: []byte("via-new-tx")})
	rqExpect(t, ch, map[string][]string{
		"dq":   {"via-dx", "via-amq.direct"},
		"dq2":  {"via-dx2"},
		"daeq": {"via-ae"},
	})
	if err := ch.QueueUnbind("dq", "a.#", "dx", amqp091.Table{"bk": int32(1)}); err != nil {
		t.Fatal(err)
	}
	ch.Publish("dx", "a.z", amqp091.Publishing{Body: []byte("after-unbind")})
	rqExpect(t, ch, map[string][]string{"dq": nil, "daeq": {"after-unbind"}})

	// Argument tables round-trip: same arguments redeclare, others don't.
	if _, err := ch.QueueDeclare("dq", true, false, false, false, dqArgs); err != nil {
		t.Fatalf("redeclare dq with its arguments: %v", err)
	}
	must(ch.ExchangeDeclare("dx", "topic", true, false, false, false, amqp091.Table{"alternate-exchange": "dae"}))
	must(ch.ExchangeDeclare("dint", "fanout", true, false, true, false, nil))
	rqFails(t, conn, 406, "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'dq' in vhost '/': received the value '5' of type 'long' but current is the value '100' of type 'long'",
		func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("dq", true, false, false, false, amqp091.Table{"x-max-length": int64(5), "x-foo": "bar", "x-single-active-consumer": false})
			return err
		})
	rqFails(t, conn, 406, "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'dq' in vhost '/': received 'false' but current is 'true'",
		func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("dq", false, false, false, false, dqArgs)
			return err
		})
	rqFails(t, conn, 406, "PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange 'dx' in vhost '/': received none but current is the value 'dae' of type 'longstr'",
		func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclare("dx", "topic", true, false, false, false, nil)
		})

	// Deletions are durable too: a deleted queue (with a persistent
	// message), a deleted exchange (with bindings both ways) and a removed
	// binding stay gone after a second restart.
	ch.Publish("", "daeq", amqp091.Publishing{Body: []byte("deleted-with-queue"), DeliveryMode: amqp091.Persistent})
	if n, err := ch.QueueDelete("daeq", false, false, false); err != nil || n != 1 {
		t.Fatalf("delete daeq = %d, %v", n, err)
	}
	must(ch.ExchangeDelete("dx2", false, false))
	b.Restart()
	conn = b.Dial(t)
	ch = brokertest.NewSession(t, conn)
	if q, err := rqPassiveQueue(conn, "dq"); err != nil || q.Messages != 0 {
		t.Fatalf("dq after second restart: %+v, %v", q, err)
	}
	_, err = rqPassiveQueue(conn, "daeq")
	rqWantErr(t, err, 404, "NOT_FOUND - no queue 'daeq' in vhost '/'")
	if rqExchangeExists(t, conn, "dx2") {
		t.Error("deleted exchange dx2 came back")
	}
	ch.Declare("daeq", nil)
	ch.Bind("daeq", "", "dae", nil)
	ch.Publish("dx", "a.z", amqp091.Publishing{Body: []byte("no-binding")})
	// b.x still matches dx → dint (so it doesn't go to the alternate), but
	// not dx → dx2 → dq2.
	ch.Publish("dx", "b.x", amqp091.Publishing{Body: []byte("no-dx2")})
	rqExpect(t, ch, map[string][]string{"dq": nil, "dq2": nil, "daeq": {"no-binding"}})
}

// TestQueueVHostDefaultType declares queues without x-queue-type in vhosts
// with a default queue type, as RabbitMQ 3.13/4.x applies it
// (rabbit_amqqueue:augment_declare_args): a queue that can be of the
// default type gets it, written into its arguments; an exclusive,
// auto-delete or non-durable one becomes classic, also written; a type the
// client names is kept. A redeclare without x-queue-type is equivalent to
// the declare that made the queue, and a classic queue made before the
// default was set is refused by one, as RabbitMQ refuses it. The type
// survives a restart.
func TestQueueVHostDefaultType(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for _, vh := range []string{"/qq", "/cq", "/sq"} {
		dqt := map[string]string{"/qq": "quorum", "/cq": "classic", "/sq": "stream"}[vh]
		if err := b.Broker.PutVHost(broker.VHostInfo{Name: vh, DefaultQueueType: dqt}); err != nil {
			t.Fatal(err)
		}
		if err := b.Broker.SetPermissions("guest", vh, ".*", ".*", ".*"); err != nil {
			t.Fatal(err)
		}
	}
	conn := pmDial(t, b, "guest", "guest", "/qq")
	ch := brokertest.NewSession(t, conn)
	// A classic queue from before the default was set.
	if err := b.Broker.PutVHost(broker.VHostInfo{Name: "/qq"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("old", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Broker.PutVHost(broker.VHostInfo{Name: "/qq", DefaultQueueType: "quorum"}); err != nil {
		t.Fatal(err)
	}

	type decl struct {
		name                           string
		durable, autoDelete, exclusive bool
		args                           amqp091.Table
		wantType                       string
		wantArgs                       amqp.Table
	}
	decls := []decl{
		{"dq", true, false, false, nil, "quorum", amqp.Table{{Key: "x-queue-type", Value: "quorum"}}},
		{"dq-args", true, false, false, amqp091.Table{"x-max-length": int32(5)}, "quorum",
			amqp.Table{{Key: "x-max-length", Value: int32(5)}, {Key: "x-queue-type", Value: "quorum"}}},
		{"named-classic", true, false, false, amqp091.Table{"x-queue-type": "classic"}, "classic", amqp.Table{{Key: "x-queue-type", Value: "classic"}}},
		{"transient", false, false, false, nil, "classic", amqp.Table{{Key: "x-queue-type", Value: "classic"}}},
		{"auto-delete", true, true, false, nil, "classic", amqp.Table{{Key: "x-queue-type", Value: "classic"}}},
		{"exclusive", true, false, true, nil, "classic", amqp.Table{{Key: "x-queue-type", Value: "classic"}}},
	}
	for _, d := range decls {
		if _, err := ch.QueueDeclare(d.name, d.durable, d.autoDelete, d.exclusive, false, d.args); err != nil {
			t.Fatalf("declare %s: %v", d.name, err)
		}
		// The same declare again is equivalent.
		if _, err := ch.QueueDeclare(d.name, d.durable, d.autoDelete, d.exclusive, false, d.args); err != nil {
			t.Fatalf("redeclare %s: %v", d.name, err)
		}
		qi, err := b.Broker.Queue("/qq", d.name)
		if err != nil {
			t.Fatal(err)
		}
		if qi.Type != d.wantType || !reflect.DeepEqual(qi.Arguments, d.wantArgs) {
			t.Errorf("%s: type %s, arguments %v; want %s, %v", d.name, qi.Type, qi.Arguments, d.wantType, d.wantArgs)
		}
	}
	// The quorum queue is one: an argument only classic queues take is
	// refused, naming the type the vhost gave it.
	rqFails(t, conn, 406, "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'prio' in vhost '/qq' of queue type rabbit_quorum_queue", func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("prio", true, false, false, false, amqp091.Table{"x-max-priority": int32(5)})
		return err
	})
	// A queue of another type is inequivalent either way.
	rqFails(t, conn, 406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'dq' in vhost '/qq': received the value 'classic' of type 'longstr' but current is the value 'quorum' of type 'longstr'", func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("dq", true, false, false, false, amqp091.Table{"x-queue-type": "classic"})
		return err
	})
	rqFails(t, conn, 406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'old' in vhost '/qq': received the value 'quorum' of type 'longstr' but current is none", func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("old", true, false, false, false, nil)
		return err
	})
	// Naming classic still finds the old queue equivalent.
	if _, err := ch.QueueDeclare("old", true, false, false, false, amqp091.Table{"x-queue-type": "classic"}); err != nil {
		t.Fatal(err)
	}
	// A passive declare is never refused for the type.
	if _, err := rqPassiveQueue(conn, "old"); err != nil {
		t.Fatal(err)
	}

	// A classic default shows in the arguments and changes nothing else.
	cch := brokertest.NewSession(t, pmDial(t, b, "guest", "guest", "/cq"))
	if _, err := cch.QueueDeclare("c", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if qi, err := b.Broker.Queue("/cq", "c"); err != nil || qi.Type != "classic" || !reflect.DeepEqual(qi.Arguments, amqp.Table{{Key: "x-queue-type", Value: "classic"}}) {
		t.Fatalf("classic default: %+v, %v", qi, err)
	}
	// A stream default is refused, saying why; a queue that cannot be a
	// stream is classic.
	sconn := pmDial(t, b, "guest", "guest", "/sq")
	rqFails(t, sconn, 406, "PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue 's' in vhost '/sq': the vhost's default queue type is stream, which brokerd does not support; name x-queue-type classic or quorum, or change the vhost's default", func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("s", true, false, false, false, nil)
		return err
	})
	if _, err := brokertest.NewSession(t, sconn).QueueDeclare("s-excl", false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}

	b.Restart()
	for _, name := range []string{"dq", "dq-args", "named-classic", "auto-delete"} {
		qi, err := b.Broker.Queue("/qq", name)
		if err != nil {
			t.Fatalf("%s after restart: %v", name, err)
		}
		for _, d := range decls {
			if d.name == name && (qi.Type != d.wantType || !reflect.DeepEqual(qi.Arguments, d.wantArgs)) {
				t.Errorf("%s after restart: type %s, arguments %v", name, qi.Type, qi.Arguments)
			}
		}
	}
	ch = brokertest.NewSession(t, pmDial(t, b, "guest", "guest", "/qq"))
	if _, err := ch.QueueDeclare("dq", true, false, false, false, nil); err != nil {
		t.Fatalf("redeclare after restart: %v", err)
	}
}

// TestImportVHostDefaultType imports queues without x-queue-type into a
// vhost the file creates with a default queue type and into one that has
// a default already: each gets its type as a queue.declare in the vhost
// would (RabbitMQ imports vhosts before queues and declares each queue
// with augment_declare_args). A queue already there is checked for
// equivalence with the type applied: the file's classic queue in a
// quorum-default vhost is refused, changing nothing.
func TestImportVHostDefaultType(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	if err := b.Broker.PutVHost(broker.VHostInfo{Name: "/qq", DefaultQueueType: "quorum"}); err != nil {
		t.Fatal(err)
	}
	defs := &broker.Definitions{
		VHosts: []broker.DefVHost{{Info: broker.VHostInfo{Name: "/new", DefaultQueueType: "quorum"}, Metadata: true}},
		Queues: []broker.DefQueue{
			{VHost: "/new", Name: "orders", Durable: true},
			{VHost: "/new", Name: "scratch", Durable: true, AutoDelete: true},
			{VHost: "/qq", Name: "billing", Durable: true, Arguments: amqp.Table{{Key: "x-max-length", Value: int64(10)}}},
		},
	}
	if err := b.Broker.ImportDefinitions(defs); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		vhost, name, qtype string
		args               amqp.Table
	}{
		{"/new", "orders", "quorum", amqp.Table{{Key: "x-queue-type", Value: "quorum"}}},
		{"/new", "scratch", "classic", amqp.Table{{Key: "x-queue-type", Value: "classic"}}},
		{"/qq", "billing", "quorum", amqp.Table{{Key: "x-max-length", Value: int64(10)}, {Key: "x-queue-type", Value: "quorum"}}},
	} {
		qi, err := b.Broker.Queue(w.vhost, w.name)
		if err != nil || qi.Type != w.qtype || !reflect.DeepEqual(qi.Arguments, w.args) {
			t.Errorf("%s %s: %+v, %v; want type %s, arguments %v", w.vhost, w.name, qi, err, w.qtype, w.args)
		}
	}
	// The same file again is equivalent: nothing is refused.
	if err := b.Broker.ImportDefinitions(defs); err != nil {
		t.Fatalf("import again: %v", err)
	}
	// A classic queue declared before the default was set: a file naming
	// it without a type is inequivalent, and nothing else in it is made.
	if err := b.Broker.PutVHost(broker.VHostInfo{Name: "/late"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Broker.ImportDefinitions(&broker.Definitions{Queues: []broker.DefQueue{{VHost: "/late", Name: "old", Durable: true}}}); err != nil {
		t.Fatal(err)
	}
	err := b.Broker.ImportDefinitions(&broker.Definitions{
		VHosts: []broker.DefVHost{{Info: broker.VHostInfo{Name: "/late", DefaultQueueType: "quorum"}, Metadata: true}},
		Queues: []broker.DefQueue{{VHost: "/late", Name: "old", Durable: true}, {VHost: "/late", Name: "other", Durable: true}},
	})
	var de *broker.DefinitionsError
	if !errors.As(err, &de) || len(de.Problems) != 1 || !strings.Contains(de.Problems[0], "inequivalent arg 'x-queue-type' for queue 'old'") {
		t.Fatalf("import over a classic queue: %v", err)
	}
	if _, err := b.Broker.Queue("/late", "other"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("a refused file made a queue: %v", err)
	}
	for _, vi := range b.Broker.VHosts() {
		if vi.Name == "/late" && vi.DefaultQueueType != "" {
			t.Fatalf("a refused file set the vhost's default: %+v", vi)
		}
	}
}
