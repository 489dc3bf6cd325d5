// Tests of routing: exchange types, bindings, alternate exchanges, exchange-to-exchange.

package broker_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker/brokertest"
)

// Helpers shared by routing_test.go and queue_test.go carry the rq prefix
// so they cannot collide with other test files of the package; declaring,
// publishing and draining are brokertest.Session's verbs.

// rqExpect drains each queue and compares its bodies with want.
func rqExpect(t *testing.T, ch *brokertest.Session, want map[string][]string) {
	t.Helper()
	queues := make([]string, 0, len(want))
	for q := range want {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	for _, q := range queues {
		got := ch.Drain(q)
		if !slices.Equal(got, want[q]) {
			t.Errorf("queue %q got %q, want %q", q, got, want[q])
		}
	}
}

// rqWantErr asserts that err is the AMQP error code with exactly reason.
func rqWantErr(t *testing.T, err error, code int, reason string) {
	t.Helper()
	var ae *amqp091.Error
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v, want %d %q", err, code, reason)
	}
	if ae.Code != code || ae.Reason != reason {
		t.Fatalf("err = %d %q\nwant  %d %q", ae.Code, ae.Reason, code, reason)
	}
}

// rqFails runs op on a fresh channel of conn and asserts the channel (or
// connection) error it gets.
func rqFails(t *testing.T, conn *amqp091.Connection, code int, reason string, op func(ch *amqp091.Channel) error) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	rqWantErr(t, op(ch), code, reason)
}

// rqPublishFails publishes on a fresh channel of conn and asserts the
// error that closes the channel.
func rqPublishFails(t *testing.T, conn *amqp091.Connection, exchange, key string, code int, reason string) {
	t.Helper()
	ch := brokertest.NewSession(t, conn)
	rqWantErr(t, brokertest.TryPublish(ch.Channel, exchange, key, amqp091.Publishing{Body: []byte("x")}), code, reason)
}

// rqPassiveQueue returns a passive declare's message and consumer counts,
// or the error.
func rqPassiveQueue(conn *amqp091.Connection, name string) (amqp091.Queue, error) {
	ch, err := conn.Channel()
	if err != nil {
		return amqp091.Queue{}, err
	}
	q, err := ch.QueueDeclarePassive(name, false, false, false, false, nil)
	if err == nil {
		ch.Close()
	}
	return q, err
}

// rqExchangeExists reports whether a passive exchange.declare succeeds;
// any error other than 404 fails the test.
func rqExchangeExists(t *testing.T, conn *amqp091.Connection, name string) bool {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	err = ch.ExchangeDeclarePassive(name, "", false, false, false, false, nil)
	if err == nil {
		ch.Close()
		return true
	}
	var ae *amqp091.Error
	if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
		return false
	}
	t.Fatalf("passive declare of exchange %q: %v", name, err)
	return false
}

func TestRoutingDirect(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	ch.DeclareExchange("d", "direct", nil)
	ch.Declare("q1", nil)
	ch.Declare("q2", nil)
	ch.Declare("q3", nil)
	ch.Bind("q1", "a", "d", nil)
	ch.Bind("q2", "a", "d", nil) // two queues, same key
	ch.Bind("q3", "b", "d", nil)
	// q3 bound twice more with different identities: key "c" plain and
	// with arguments. One message still gives one copy.
	ch.Bind("q3", "c", "d", nil)
	ch.Bind("q3", "c", "d", amqp091.Table{"tag": "second"})

	ch.Publish("d", "a", amqp091.Publishing{Body: []byte("to-a")})
	ch.Publish("d", "b", amqp091.Publishing{Body: []byte("to-b")})
	ch.Publish("d", "c", amqp091.Publishing{Body: []byte("to-c")})
	ch.Publish("d", "A", amqp091.Publishing{Body: []byte("case-differs")})
	ch.Publish("d", "a.b", amqp091.Publishing{Body: []byte("no-pattern")})
	// CC adds routing keys: b and c both lead to q3, which gets one copy.
	ch.Publish("d", "b", amqp091.Publishing{Body: []byte("cc"), Headers: amqp091.Table{"CC": []any{"c", "a"}}})

	rqExpect(t, ch, map[string][]string{
		"q1": {"to-a", "cc"},
		"q2": {"to-a", "cc"},
		"q3": {"to-b", "to-c", "cc"},
	})
}

func TestRoutingFanout(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	ch.DeclareExchange("f", "fanout", nil)
	ch.Declare("q1", nil)
	ch.Declare("q2", nil)
	ch.Declare("unbound", nil)
	ch.Bind("q1", "", "f", nil)
	ch.Bind("q2", "ignored-key", "f", nil)
	ch.Publish("f", "", amqp091.Publishing{Body: []byte("m1")})
	ch.Publish("f", "any.key", amqp091.Publishing{Body: []byte("m2")})
	rqExpect(t, ch, map[string][]string{
		"q1":      {"m1", "m2"},
		"q2":      {"m1", "m2"},
		"unbound": nil,
	})
}

func TestRoutingTopic(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	ch.DeclareExchange("t", "topic", nil)
	bindings := map[string][]string{
		"star":     {"a.*"},
		"hash":     {"a.#"},
		"mid":      {"a.#.b"},
		"all":      {"#"},
		"one":      {"*"},
		"empty":    {"a.*.b"},
		"exact":    {"a.b"},
		"multi":    {"x.*", "*.y"},
		"hashhash": {"#.#.z"},
	}
	for q, keys := range bindings {
		ch.Declare(q, nil)
		for _, k := range keys {
			ch.Bind(q, k, "t", nil)
		}
	}
	for _, key := range []string{"a", "a.b", "a.c.d.b", "a..b", "x.y", "b", "", "z", "q.r.z", "a.b.c"} {
		ch.Publish("t", key, amqp091.Publishing{Body: []byte("<" + key + ">")})
	}
	rqExpect(t, ch, map[string][]string{
		// '*' is exactly one word.
		"star": {"<a.b>"},
		// '#' matches zero words too: "a" matches "a.#".
		"hash": {"<a>", "<a.b>", "<a.c.d.b>", "<a..b>", "<a.b.c>"},
		"mid":  {"<a.b>", "<a.c.d.b>", "<a..b>"},
		"all":  {"<a>", "<a.b>", "<a.c.d.b>", "<a..b>", "<x.y>", "<b>", "<>", "<z>", "<q.r.z>", "<a.b.c>"},
		// The empty key has no words, so "*" does not match it.
		"one": {"<a>", "<b>", "<z>"},
		// "a..b" has an empty middle word, which '*' matches.
		"empty": {"<a..b>"},
		"exact": {"<a.b>"},
		// Matching both bindings still gives one copy.
		"multi":    {"<x.y>"},
		"hashhash": {"<z>", "<q.r.z>"},
	})
}

func TestRoutingHeaders(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	ch.DeclareExchange("h", "headers", nil)
	bindings := map[string]amqp091.Table{
		"all":      {"x-match": "all", "h1": "v1", "h2": int32(5)},
		"any":      {"x-match": "any", "h1": "v1", "h2": int32(5)},
		"default":  {"h1": "v1"}, // no x-match: all
		"allIgnX":  {"x-match": "all", "x-k": "xv", "h1": "v1"},
		"anyIgnX":  {"x-match": "any", "x-k": "xv"},
		"allWithX": {"x-match": "all-with-x", "x-k": "xv", "h1": "v1"},
		"anyWithX": {"x-match": "any-with-x", "x-k": "xv"},
		"void":     {"h3": nil},
		"bin":      {"h4": []byte("raw")},
	}
	for q, args := range bindings {
		ch.Declare(q, nil)
		ch.Bind(q, "key-is-ignored", "h", args)
	}
	msgs := []struct {
		body    string
		headers amqp091.Table
	}{
		// int64 5 equals the binding's int32 5.
		{"m1", amqp091.Table{"h1": "v1", "h2": int64(5)}},
		{"m2", amqp091.Table{"h1": "v1"}},
		{"m3", amqp091.Table{"h2": int64(6), "x-k": "xv"}},
		{"m4", amqp091.Table{"h1": "v1", "x-k": "xv"}},
		// A void binding value matches any value of a present header.
		{"m5", amqp091.Table{"h3": "anything"}},
		{"m6", amqp091.Table{"h3": int32(0), "h2": uint8(5)}},
		{"m7", nil},
		{"m8", amqp091.Table{"h1": "V1", "h2": "5"}},
		// A longstr header equals a binary binding value with the same bytes.
		{"m9", amqp091.Table{"h4": "raw"}},
	}
	for _, m := range msgs {
		ch.Publish("h", "rk", amqp091.Publishing{Body: []byte(m.body), Headers: m.headers})
	}
	rqExpect(t, ch, map[string][]string{
		"all":     {"m1"},
		"any":     {"m1", "m2", "m4", "m6"},
		"default": {"m1", "m2", "m4"},
		// x- keys of the binding are ignored by all / any ...
		"allIgnX": {"m1", "m2", "m4"},
		"anyIgnX": nil,
		// ... and considered by all-with-x / any-with-x.
		"allWithX": {"m4"},
		"anyWithX": {"m3", "m4"},
		"void":     {"m5", "m6"},
		"bin":      {"m9"},
	})
}

func TestHeadersBindingRejectsBadXMatch(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	ch.DeclareExchange("h", "headers", nil)
	ch.Declare("q", nil)
	rqFails(t, conn, 406, `PRECONDITION_FAILED - Invalid x-match field value <<"bogus">>; expected all, any, all-with-x, or any-with-x`,
		func(ch *amqp091.Channel) error {
			return ch.QueueBind("q", "", "h", false, amqp091.Table{"x-match": "bogus"})
		})
	rqFails(t, conn, 406, "PRECONDITION_FAILED - Invalid x-match field type byte (value 1); expected longstr",
		func(ch *amqp091.Channel) error {
			return ch.QueueBind("q", "", "h", false, amqp091.Table{"x-match": int8(1)})
		})
	// Other exchange types don't interpret x-match.
	ch.Bind("q", "k", "amq.direct", amqp091.Table{"x-match": "bogus"})
}

func TestRoutingDefaultExchange(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	ch.Declare("q1", nil)
	ch.Declare("q2", nil)
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	ch.PublishBodies("q1", "m1")
	ch.PublishBodies("q2", "m2")
	ch.Publish("", "missing", amqp091.Publishing{Body: []byte("lost")}, brokertest.Mandatory)
	// The return precedes the confirm, so it has arrived.
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || r.ReplyText != "NO_ROUTE" || r.Exchange != "" || r.RoutingKey != "missing" || string(r.Body) != "lost" {
			t.Errorf("return = %d %q exchange %q key %q body %q", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey, r.Body)
		}
	default:
		t.Error("unroutable mandatory message not returned")
	}
	rqExpect(t, ch, map[string][]string{"q1": {"m1"}, "q2": {"m2"}})

	const refused = "ACCESS_REFUSED - operation not permitted on the default exchange"
	rqFails(t, conn, 403, refused, func(ch *amqp091.Channel) error { return ch.QueueBind("q1", "k", "", false, nil) })
	rqFails(t, conn, 403, refused, func(ch *amqp091.Channel) error { return ch.QueueUnbind("q1", "q1", "", nil) })
	rqFails(t, conn, 403, refused, func(ch *amqp091.Channel) error {
		return ch.ExchangeDeclare("", "direct", true, false, false, false, nil)
	})
	rqFails(t, conn, 403, refused, func(ch *amqp091.Channel) error {
		return ch.ExchangeDeclarePassive("", "direct", true, false, false, false, nil)
	})
	rqFails(t, conn, 403, refused, func(ch *amqp091.Channel) error { return ch.ExchangeDelete("", false, false) })
	rqFails(t, conn, 403, refused, func(ch *amqp091.Channel) error { return ch.ExchangeBind("", "k", "amq.direct", false, nil) })
	rqFails(t, conn, 403, refused, func(ch *amqp091.Channel) error { return ch.ExchangeBind("amq.direct", "k", "", false, nil) })
}

func TestStandardExchanges(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	types := map[string]string{
		"amq.direct": "direct", "amq.fanout": "fanout", "amq.topic": "topic",
		"amq.headers": "headers", "amq.match": "headers",
	}
	other := map[string]string{"direct": "fanout", "fanout": "topic", "topic": "headers", "headers": "direct"}
	for name, typ := range types {
		if err := ch.ExchangeDeclarePassive(name, typ, true, false, false, false, nil); err != nil {
			t.Fatalf("passive declare %s: %v", name, err)
		}
		if err := ch.ExchangeDeclare(name, typ, true, false, false, false, nil); err != nil {
			t.Fatalf("redeclare %s as %s: %v", name, typ, err)
		}
		rqFails(t, conn, 406, "PRECONDITION_FAILED - inequivalent arg 'type' for exchange '"+name+"' in vhost '/': received '"+other[typ]+"' but current is '"+typ+"'",
			func(ch *amqp091.Channel) error {
				return ch.ExchangeDeclare(name, other[typ], true, false, false, false, nil)
			})
		rqFails(t, conn, 406, "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange '"+name+"' in vhost '/': received 'false' but current is 'true'",
			func(ch *amqp091.Channel) error {
				return ch.ExchangeDeclare(name, typ, false, false, false, false, nil)
			})
		rqFails(t, conn, 403, "ACCESS_REFUSED - deletion of system exchange '"+name+"' in vhost '/' not allowed",
			func(ch *amqp091.Channel) error { return ch.ExchangeDelete(name, false, false) })
	}
	// They route as their types say.
	ch.Declare("qd", nil)
	ch.Declare("qf", nil)
	ch.Declare("qt", nil)
	ch.Declare("qh", nil)
	ch.Declare("qm", nil)
	ch.Bind("qd", "k", "amq.direct", nil)
	ch.Bind("qf", "", "amq.fanout", nil)
	ch.Bind("qt", "k.*", "amq.topic", nil)
	ch.Bind("qh", "", "amq.headers", amqp091.Table{"h": "1"})
	ch.Bind("qm", "", "amq.match", amqp091.Table{"x-match": "any", "h": "1", "g": "2"})
	for _, x := range []string{"amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"} {
		ch.Publish(x, "k", amqp091.Publishing{Body: []byte(x + "/k")})
		ch.Publish(x, "k.z", amqp091.Publishing{Body: []byte(x + "/k.z"), Headers: amqp091.Table{"h": "1"}})
	}
	rqExpect(t, ch, map[string][]string{
		"qd": {"amq.direct/k"},
		"qf": {"amq.fanout/k", "amq.fanout/k.z"},
		"qt": {"amq.topic/k.z"},
		"qh": {"amq.headers/k.z"},
		"qm": {"amq.match/k.z"},
	})
}

func TestExchangeDeclare(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn

	t.Run("passive", func(t *testing.T) {
		ch := ch.With(t)
		rqFails(t, conn, 404, "NOT_FOUND - no exchange 'x' in vhost '/'", func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclarePassive("x", "direct", false, false, false, false, nil)
		})
		ch.DeclareExchange("x", "topic", nil)
		// A passive declare does not compare the type.
		if err := ch.ExchangeDeclarePassive("x", "fanout", true, true, true, false, nil); err != nil {
			t.Fatalf("passive declare of existing exchange: %v", err)
		}
	})

	t.Run("equivalence", func(t *testing.T) {
		ch := ch.With(t)
		ch.DeclareExchange("eq", "direct", nil)
		ch.DeclareExchange("eq", "direct", nil)
		for _, c := range []struct {
			kind                          string
			durable, autoDelete, internal bool
			reason                        string
		}{
			{"topic", false, false, false, "inequivalent arg 'type' for exchange 'eq' in vhost '/': received 'topic' but current is 'direct'"},
			{"direct", true, false, false, "inequivalent arg 'durable' for exchange 'eq' in vhost '/': received 'true' but current is 'false'"},
			{"direct", false, true, false, "inequivalent arg 'auto_delete' for exchange 'eq' in vhost '/': received 'true' but current is 'false'"},
			{"direct", false, false, true, "inequivalent arg 'internal' for exchange 'eq' in vhost '/': received 'true' but current is 'false'"},
		} {
			rqFails(t, conn, 406, "PRECONDITION_FAILED - "+c.reason, func(ch *amqp091.Channel) error {
				return ch.ExchangeDeclare("eq", c.kind, c.durable, c.autoDelete, c.internal, false, nil)
			})
		}
	})

	t.Run("reserved", func(t *testing.T) {
		rqFails(t, conn, 403, "ACCESS_REFUSED - exchange name 'amq.mine' contains reserved prefix 'amq.*'", func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclare("amq.mine", "direct", false, false, false, false, nil)
		})
		if rqExchangeExists(t, conn, "amq.mine") {
			t.Fatal("amq.mine was created")
		}
	})

	t.Run("unknown type", func(t *testing.T) {
		other := brokertest.Start(t, brokertest.Config{}).Dial(t)
		closed := other.NotifyClose(make(chan *amqp091.Error, 1))
		ch, err := other.Channel()
		if err != nil {
			t.Fatal(err)
		}
		err = ch.ExchangeDeclare("bad", "bogus", false, false, false, false, nil)
		rqWantErr(t, err, 503, "COMMAND_INVALID - unknown exchange type 'bogus'")
		// A hard error: the whole connection closes.
		select {
		case e := <-closed:
			rqWantErr(t, e, 503, "COMMAND_INVALID - unknown exchange type 'bogus'")
		case <-time.After(brokertest.Wait):
			t.Fatal("connection not closed")
		}
		if !other.IsClosed() {
			t.Fatal("connection still open")
		}
	})

	t.Run("auto-delete", func(t *testing.T) {
		ch := ch.With(t)
		if err := ch.ExchangeDeclare("ad", "fanout", false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
		// Never bound: not deleted.
		if !rqExchangeExists(t, conn, "ad") {
			t.Fatal("auto-delete exchange deleted before any binding")
		}
		ch.Declare("ad1", nil)
		ch.Declare("ad2", nil)
		ch.Bind("ad1", "", "ad", nil)
		ch.Bind("ad2", "", "ad", nil)
		if err := ch.QueueUnbind("ad1", "", "ad", nil); err != nil {
			t.Fatal(err)
		}
		if !rqExchangeExists(t, conn, "ad") {
			t.Fatal("auto-delete exchange deleted while it had a binding")
		}
		// Its last binding goes with the queue.
		if _, err := ch.QueueDelete("ad2", false, false, false); err != nil {
			t.Fatal(err)
		}
		if rqExchangeExists(t, conn, "ad") {
			t.Fatal("auto-delete exchange survived its last binding")
		}

		// Through unbind, for an exchange-to-exchange binding.
		if err := ch.ExchangeDeclare("ad", "fanout", false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
		ch.BindExchange("amq.fanout", "", "ad", nil)
		if err := ch.ExchangeUnbind("amq.fanout", "", "ad", false, nil); err != nil {
			t.Fatal(err)
		}
		if rqExchangeExists(t, conn, "ad") {
			t.Fatal("auto-delete exchange survived exchange.unbind of its last binding")
		}
	})

	t.Run("internal", func(t *testing.T) {
		ch := ch.With(t)
		if err := ch.ExchangeDeclare("int", "fanout", false, false, true, false, nil); err != nil {
			t.Fatal(err)
		}
		ch.Declare("behind-int", nil)
		ch.Bind("behind-int", "", "int", nil)
		rqPublishFails(t, conn, "int", "", 403, "ACCESS_REFUSED - cannot publish to internal exchange 'int' in vhost '/'")
		ch.DeclareExchange("front", "direct", nil)
		ch.BindExchange("int", "k", "front", nil)
		ch.Publish("front", "k", amqp091.Publishing{Body: []byte("via-front")})
		rqExpect(t, ch, map[string][]string{"behind-int": {"via-front"}})
	})

	t.Run("publish to missing exchange", func(t *testing.T) {
		rqPublishFails(t, conn, "nowhere", "", 404, "NOT_FOUND - no exchange 'nowhere' in vhost '/'")
	})
}

func TestExchangeDelete(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	ch.DeclareExchange("e", "direct", nil)
	ch.Declare("q", nil)
	ch.Bind("q", "k", "e", nil)
	rqFails(t, conn, 406, "PRECONDITION_FAILED - exchange 'e' in vhost '/' in use", func(ch *amqp091.Channel) error {
		return ch.ExchangeDelete("e", true, false)
	})
	if !rqExchangeExists(t, conn, "e") {
		t.Fatal("exchange deleted by a refused if-unused delete")
	}
	if err := ch.QueueUnbind("q", "k", "e", nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDelete("e", true, false); err != nil {
		t.Fatalf("if-unused delete of an unused exchange: %v", err)
	}
	if rqExchangeExists(t, conn, "e") {
		t.Fatal("exchange not deleted")
	}
	// Deleting a missing exchange is not an error.
	if err := ch.ExchangeDelete("e", false, false); err != nil {
		t.Fatalf("delete missing exchange: %v", err)
	}

	// Only bindings from the exchange make it used: being the destination
	// of an exchange binding does not (RabbitMQ's has_for_source).
	ch.DeclareExchange("dest", "fanout", nil)
	ch.BindExchange("dest", "k", "amq.direct", nil)
	if err := ch.ExchangeDelete("dest", true, false); err != nil {
		t.Fatalf("if-unused delete of a destination-only exchange: %v", err)
	}

	// Deleting an exchange removes its bindings both ways: re-created, it
	// routes nowhere and nothing routes to it.
	ch.DeclareExchange("mid", "fanout", nil)
	ch.BindExchange("mid", "k", "amq.direct", nil)
	ch.Bind("q", "", "mid", nil)
	ch.Publish("amq.direct", "k", amqp091.Publishing{Body: []byte("before")})
	if err := ch.ExchangeDelete("mid", false, false); err != nil {
		t.Fatal(err)
	}
	ch.DeclareExchange("mid", "fanout", nil)
	ch.Publish("amq.direct", "k", amqp091.Publishing{Body: []byte("after-1")})
	ch.Publish("mid", "", amqp091.Publishing{Body: []byte("after-2")})
	rqExpect(t, ch, map[string][]string{"q": {"before"}})
}

func TestExchangeToExchange(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn

	t.Run("fanout to topic to queues", func(t *testing.T) {
		ch := ch.With(t)
		ch.DeclareExchange("f", "fanout", nil)
		ch.DeclareExchange("t", "topic", nil)
		ch.BindExchange("t", "ignored", "f", nil)
		ch.Declare("ta", nil)
		ch.Declare("tall", nil)
		ch.Bind("ta", "a.*", "t", nil)
		ch.Bind("tall", "#", "t", nil)
		ch.Publish("f", "a.x", amqp091.Publishing{Body: []byte("m1")})
		ch.Publish("f", "b", amqp091.Publishing{Body: []byte("m2")})
		rqExpect(t, ch, map[string][]string{"ta": {"m1"}, "tall": {"m1", "m2"}})
	})

	t.Run("direct chain uses the key at each hop", func(t *testing.T) {
		ch := ch.With(t)
		ch.DeclareExchange("d1", "direct", nil)
		ch.DeclareExchange("d2", "direct", nil)
		ch.DeclareExchange("d3", "direct", nil)
		ch.BindExchange("d2", "k", "d1", nil)
		ch.BindExchange("d3", "k", "d2", nil)
		ch.Declare("dq", nil)
		ch.Bind("dq", "k", "d3", nil)
		ch.Bind("dq", "j", "d3", nil)
		ch.Publish("d1", "k", amqp091.Publishing{Body: []byte("k")})
		ch.Publish("d1", "j", amqp091.Publishing{Body: []byte("j")}) // stops at d1
		ch.Publish("d3", "j", amqp091.Publishing{Body: []byte("j-direct")})
		rqExpect(t, ch, map[string][]string{"dq": {"k", "j-direct"}})
	})

	t.Run("cycle", func(t *testing.T) {
		ch := ch.With(t)
		ch.DeclareExchange("c1", "fanout", nil)
		ch.DeclareExchange("c2", "fanout", nil)
		ch.DeclareExchange("c3", "fanout", nil)
		ch.BindExchange("c2", "", "c1", nil)
		ch.BindExchange("c3", "", "c2", nil)
		ch.BindExchange("c1", "", "c3", nil)
		ch.BindExchange("c1", "", "c1", nil) // self-loop
		ch.Declare("cq1", nil)
		ch.Declare("cq2", nil)
		ch.Bind("cq1", "", "c1", nil)
		ch.Bind("cq1", "", "c3", nil) // reachable twice
		ch.Bind("cq2", "", "c2", nil)
		ch.Publish("c2", "", amqp091.Publishing{Body: []byte("m")})
		rqExpect(t, ch, map[string][]string{"cq1": {"m"}, "cq2": {"m"}})

		// exchange.unbind cuts the loop at c2 → c3.
		if err := ch.ExchangeUnbind("c3", "", "c2", false, nil); err != nil {
			t.Fatal(err)
		}
		ch.Publish("c2", "", amqp091.Publishing{Body: []byte("after-unbind")})
		ch.Publish("c3", "", amqp091.Publishing{Body: []byte("from-c3")})
		rqExpect(t, ch, map[string][]string{"cq1": {"from-c3"}, "cq2": {"after-unbind", "from-c3"}})
	})

	t.Run("duplicate bind is one binding", func(t *testing.T) {
		ch := ch.With(t)
		ch.DeclareExchange("s", "direct", nil)
		ch.DeclareExchange("x", "fanout", nil)
		ch.BindExchange("x", "k", "s", nil)
		ch.BindExchange("x", "k", "s", nil)
		ch.Declare("xq", nil)
		ch.Bind("xq", "", "x", nil)
		if err := ch.ExchangeUnbind("x", "k", "s", false, nil); err != nil {
			t.Fatal(err)
		}
		ch.Publish("s", "k", amqp091.Publishing{Body: []byte("m")})
		rqExpect(t, ch, map[string][]string{"xq": nil})
	})

	t.Run("missing ends", func(t *testing.T) {
		rqFails(t, conn, 404, "NOT_FOUND - no exchange 'nope' in vhost '/'", func(ch *amqp091.Channel) error {
			return ch.ExchangeBind("amq.fanout", "", "nope", false, nil)
		})
		rqFails(t, conn, 404, "NOT_FOUND - no exchange 'nope' in vhost '/'", func(ch *amqp091.Channel) error {
			return ch.ExchangeBind("nope", "", "amq.fanout", false, nil)
		})
	})
}

func TestAlternateExchange(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	ch.DeclareExchange("ae", "fanout", nil)
	ch.DeclareExchange("main", "direct", amqp091.Table{"alternate-exchange": "ae"})
	ch.Declare("qmain", nil)
	ch.Declare("qae", nil)
	ch.Bind("qmain", "k", "main", nil)
	ch.Bind("qae", "", "ae", nil)

	// AE chain: main2 → (no match) → ae2 (no bindings) → its AE ae3.
	ch.DeclareExchange("ae3", "fanout", nil)
	ch.DeclareExchange("ae2", "direct", amqp091.Table{"alternate-exchange": "ae3"})
	ch.DeclareExchange("main2", "topic", amqp091.Table{"alternate-exchange": "ae2"})
	ch.Declare("q3", nil)
	ch.Bind("q3", "", "ae3", nil)

	// Missing AE: the message is unroutable.
	ch.DeclareExchange("main3", "direct", amqp091.Table{"alternate-exchange": "does-not-exist"})

	returns := ch.NotifyReturn(make(chan amqp091.Return, 4))
	ch.Publish("main", "k", amqp091.Publishing{Body: []byte("routable")}, brokertest.Mandatory)
	ch.Publish("main", "z", amqp091.Publishing{Body: []byte("to-ae")}, brokertest.Mandatory)
	ch.Publish("main2", "z", amqp091.Publishing{Body: []byte("to-ae3")}, brokertest.Mandatory)
	ch.Publish("main3", "z", amqp091.Publishing{Body: []byte("lost")}, brokertest.Mandatory)
	var returned []string
	for len(returns) > 0 {
		r := <-returns
		returned = append(returned, r.Exchange+"/"+string(r.Body))
	}
	if want := []string{"main3/lost"}; !slices.Equal(returned, want) {
		t.Errorf("returned %q, want %q", returned, want)
	}
	rqExpect(t, ch, map[string][]string{
		"qmain": {"routable"},
		"qae":   {"to-ae"},
		"q3":    {"to-ae3"},
	})
}

func TestAlternateExchangeRedeclare(t *testing.T) {
	ch := brokertest.Start(t, brokertest.Config{}).Session(t)
	conn := ch.Conn
	ch.DeclareExchange("m", "direct", amqp091.Table{"alternate-exchange": "ae"})
	ch.DeclareExchange("m", "direct", amqp091.Table{"alternate-exchange": "ae", "other": "ignored"})
	rqFails(t, conn, 406, "PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange 'm' in vhost '/': received the value 'ae2' of type 'longstr' but current is the value 'ae' of type 'longstr'",
		func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclare("m", "direct", false, false, false, false, amqp091.Table{"alternate-exchange": "ae2"})
		})
	rqFails(t, conn, 406, "PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange 'm' in vhost '/': received none but current is the value 'ae' of type 'longstr'",
		func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclare("m", "direct", false, false, false, false, nil)
		})
	rqFails(t, conn, 406, "PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange 'm' in vhost '/': received the value '1' of type 'signedint' but current is the value 'ae' of type 'longstr'",
		func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclare("m", "direct", false, false, false, false, amqp091.Table{"alternate-exchange": int32(1)})
		})
	// A new exchange's alternate-exchange must be a longstr.
	rqFails(t, conn, 406, "PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' in exchange 'bad' in vhost '/'",
		func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclare("bad", "direct", false, false, false, false, amqp091.Table{"alternate-exchange": int32(1)})
		})
	if rqExchangeExists(t, conn, "bad") {
		t.Fatal("exchange with an invalid alternate-exchange was created")
	}
}
