package broker_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker/brokertest"
)

// Helpers shared by routing_test.go and queue_test.go carry the rq prefix
// so they cannot collide with other test files of the package.

// rqTimeout bounds every wait for the broker.
const rqTimeout = 5 * time.Second

// rqStart starts a broker and returns it with a connection and a channel in
// confirm mode.
func rqStart(t *testing.T) (*brokertest.Instance, *amqp091.Connection, *amqp091.Channel) {
	t.Helper()
	b := brokertest.Start(t, brokertest.Config{})
	conn := b.Dial(t)
	return b, conn, rqChan(t, conn)
}

// rqChan opens a channel in confirm mode: a publish whose confirm has
// arrived has been routed and enqueued.
func rqChan(t *testing.T, conn *amqp091.Connection) *amqp091.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatalf("confirm.select: %v", err)
	}
	return ch
}

// rqPublish publishes msg and waits for its confirm, which must be an ack.
func rqPublish(t *testing.T, ch *amqp091.Channel, exchange, key string, msg amqp091.Publishing) {
	t.Helper()
	rqPublishMandatory(t, ch, exchange, key, false, msg)
}

func rqPublishMandatory(t *testing.T, ch *amqp091.Channel, exchange, key string, mandatory bool, msg amqp091.Publishing) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rqTimeout)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, mandatory, false, msg)
	if err != nil {
		t.Fatalf("publish to %q with key %q: %v", exchange, key, err)
	}
	ack, err := dc.WaitContext(ctx)
	if err != nil {
		t.Fatalf("confirm of publish to %q with key %q: %v", exchange, key, err)
	}
	if !ack {
		t.Fatalf("publish to %q with key %q was nacked", exchange, key)
	}
}

// rqPublishBody publishes a message whose body is body.
func rqPublishBody(t *testing.T, ch *amqp091.Channel, exchange, key, body string) {
	t.Helper()
	rqPublish(t, ch, exchange, key, amqp091.Publishing{Body: []byte(body)})
}

// rqDrain takes every ready message of queue with basic.get (auto-ack) and
// returns their bodies in order; nil when the queue is empty.
func rqDrain(t *testing.T, ch *amqp091.Channel, queue string) []string {
	t.Helper()
	var bodies []string
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("basic.get %q: %v", queue, err)
		}
		if !ok {
			return bodies
		}
		bodies = append(bodies, string(d.Body))
	}
}

// rqExpect drains each queue and compares its bodies with want.
func rqExpect(t *testing.T, ch *amqp091.Channel, want map[string][]string) {
	t.Helper()
	queues := make([]string, 0, len(want))
	for q := range want {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	for _, q := range queues {
		got := rqDrain(t, ch, q)
		if !slices.Equal(got, want[q]) {
			t.Errorf("queue %q got %q, want %q", q, got, want[q])
		}
	}
}

func rqDeclareQueues(t *testing.T, ch *amqp091.Channel, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := ch.QueueDeclare(n, false, false, false, false, nil); err != nil {
			t.Fatalf("declare queue %q: %v", n, err)
		}
	}
}

func rqDeclareExchange(t *testing.T, ch *amqp091.Channel, name, kind string, args amqp091.Table) {
	t.Helper()
	if err := ch.ExchangeDeclare(name, kind, false, false, false, false, args); err != nil {
		t.Fatalf("declare exchange %q (%s): %v", name, kind, err)
	}
}

func rqBind(t *testing.T, ch *amqp091.Channel, queue, key, exchange string, args amqp091.Table) {
	t.Helper()
	if err := ch.QueueBind(queue, key, exchange, false, args); err != nil {
		t.Fatalf("bind %q to %q with key %q: %v", queue, exchange, key, err)
	}
}

func rqBindX(t *testing.T, ch *amqp091.Channel, dest, key, source string, args amqp091.Table) {
	t.Helper()
	if err := ch.ExchangeBind(dest, key, source, false, args); err != nil {
		t.Fatalf("bind exchange %q to %q with key %q: %v", dest, source, key, err)
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
	ch := rqChan(t, conn)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	ctx, cancel := context.WithTimeout(context.Background(), rqTimeout)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, amqp091.Publishing{Body: []byte("x")})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if ack, _ := dc.WaitContext(ctx); ack {
		t.Fatalf("publish to %q was acked, want channel error %d", exchange, code)
	}
	select {
	case e := <-closed:
		rqWantErr(t, e, code, reason)
	case <-ctx.Done():
		t.Fatal("channel not closed")
	}
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
	_, _, ch := rqStart(t)
	rqDeclareExchange(t, ch, "d", "direct", nil)
	rqDeclareQueues(t, ch, "q1", "q2", "q3")
	rqBind(t, ch, "q1", "a", "d", nil)
	rqBind(t, ch, "q2", "a", "d", nil) // two queues, same key
	rqBind(t, ch, "q3", "b", "d", nil)
	// q3 bound twice more with different identities: key "c" plain and
	// with arguments. One message still gives one copy.
	rqBind(t, ch, "q3", "c", "d", nil)
	rqBind(t, ch, "q3", "c", "d", amqp091.Table{"tag": "second"})

	rqPublishBody(t, ch, "d", "a", "to-a")
	rqPublishBody(t, ch, "d", "b", "to-b")
	rqPublishBody(t, ch, "d", "c", "to-c")
	rqPublishBody(t, ch, "d", "A", "case-differs")
	rqPublishBody(t, ch, "d", "a.b", "no-pattern")
	// CC adds routing keys: b and c both lead to q3, which gets one copy.
	rqPublish(t, ch, "d", "b", amqp091.Publishing{Body: []byte("cc"), Headers: amqp091.Table{"CC": []any{"c", "a"}}})

	rqExpect(t, ch, map[string][]string{
		"q1": {"to-a", "cc"},
		"q2": {"to-a", "cc"},
		"q3": {"to-b", "to-c", "cc"},
	})
}

func TestRoutingFanout(t *testing.T) {
	_, _, ch := rqStart(t)
	rqDeclareExchange(t, ch, "f", "fanout", nil)
	rqDeclareQueues(t, ch, "q1", "q2", "unbound")
	rqBind(t, ch, "q1", "", "f", nil)
	rqBind(t, ch, "q2", "ignored-key", "f", nil)
	rqPublishBody(t, ch, "f", "", "m1")
	rqPublishBody(t, ch, "f", "any.key", "m2")
	rqExpect(t, ch, map[string][]string{
		"q1":      {"m1", "m2"},
		"q2":      {"m1", "m2"},
		"unbound": nil,
	})
}

func TestRoutingTopic(t *testing.T) {
	_, _, ch := rqStart(t)
	rqDeclareExchange(t, ch, "t", "topic", nil)
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
		rqDeclareQueues(t, ch, q)
		for _, k := range keys {
			rqBind(t, ch, q, k, "t", nil)
		}
	}
	for _, key := range []string{"a", "a.b", "a.c.d.b", "a..b", "x.y", "b", "", "z", "q.r.z", "a.b.c"} {
		rqPublishBody(t, ch, "t", key, "<"+key+">")
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
	_, _, ch := rqStart(t)
	rqDeclareExchange(t, ch, "h", "headers", nil)
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
		rqDeclareQueues(t, ch, q)
		rqBind(t, ch, q, "key-is-ignored", "h", args)
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
		rqPublish(t, ch, "h", "rk", amqp091.Publishing{Body: []byte(m.body), Headers: m.headers})
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
	_, conn, ch := rqStart(t)
	rqDeclareExchange(t, ch, "h", "headers", nil)
	rqDeclareQueues(t, ch, "q")
	rqFails(t, conn, 406, `PRECONDITION_FAILED - Invalid x-match field value <<"bogus">>; expected all, any, all-with-x, or any-with-x`,
		func(ch *amqp091.Channel) error {
			return ch.QueueBind("q", "", "h", false, amqp091.Table{"x-match": "bogus"})
		})
	rqFails(t, conn, 406, "PRECONDITION_FAILED - Invalid x-match field type byte (value 1); expected longstr",
		func(ch *amqp091.Channel) error {
			return ch.QueueBind("q", "", "h", false, amqp091.Table{"x-match": int8(1)})
		})
	// Other exchange types don't interpret x-match.
	rqBind(t, ch, "q", "k", "amq.direct", amqp091.Table{"x-match": "bogus"})
}

func TestRoutingDefaultExchange(t *testing.T) {
	_, conn, ch := rqStart(t)
	rqDeclareQueues(t, ch, "q1", "q2")
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	rqPublishBody(t, ch, "", "q1", "m1")
	rqPublishBody(t, ch, "", "q2", "m2")
	rqPublishMandatory(t, ch, "", "missing", true, amqp091.Publishing{Body: []byte("lost")})
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
	_, conn, ch := rqStart(t)
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
	rqDeclareQueues(t, ch, "qd", "qf", "qt", "qh", "qm")
	rqBind(t, ch, "qd", "k", "amq.direct", nil)
	rqBind(t, ch, "qf", "", "amq.fanout", nil)
	rqBind(t, ch, "qt", "k.*", "amq.topic", nil)
	rqBind(t, ch, "qh", "", "amq.headers", amqp091.Table{"h": "1"})
	rqBind(t, ch, "qm", "", "amq.match", amqp091.Table{"x-match": "any", "h": "1", "g": "2"})
	for _, x := range []string{"amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"} {
		rqPublish(t, ch, x, "k", amqp091.Publishing{Body: []byte(x + "/k")})
		rqPublish(t, ch, x, "k.z", amqp091.Publishing{Body: []byte(x + "/k.z"), Headers: amqp091.Table{"h": "1"}})
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
	_, conn, ch := rqStart(t)

	t.Run("passive", func(t *testing.T) {
		rqFails(t, conn, 404, "NOT_FOUND - no exchange 'x' in vhost '/'", func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclarePassive("x", "direct", false, false, false, false, nil)
		})
		rqDeclareExchange(t, ch, "x", "topic", nil)
		// A passive declare does not compare the type.
		if err := ch.ExchangeDeclarePassive("x", "fanout", true, true, true, false, nil); err != nil {
			t.Fatalf("passive declare of existing exchange: %v", err)
		}
	})

	t.Run("equivalence", func(t *testing.T) {
		rqDeclareExchange(t, ch, "eq", "direct", nil)
		rqDeclareExchange(t, ch, "eq", "direct", nil)
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
		case <-time.After(rqTimeout):
			t.Fatal("connection not closed")
		}
		if !other.IsClosed() {
			t.Fatal("connection still open")
		}
	})

	t.Run("auto-delete", func(t *testing.T) {
		if err := ch.ExchangeDeclare("ad", "fanout", false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
		// Never bound: not deleted.
		if !rqExchangeExists(t, conn, "ad") {
			t.Fatal("auto-delete exchange deleted before any binding")
		}
		rqDeclareQueues(t, ch, "ad1", "ad2")
		rqBind(t, ch, "ad1", "", "ad", nil)
		rqBind(t, ch, "ad2", "", "ad", nil)
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
		rqBindX(t, ch, "amq.fanout", "", "ad", nil)
		if err := ch.ExchangeUnbind("amq.fanout", "", "ad", false, nil); err != nil {
			t.Fatal(err)
		}
		if rqExchangeExists(t, conn, "ad") {
			t.Fatal("auto-delete exchange survived exchange.unbind of its last binding")
		}
	})

	t.Run("internal", func(t *testing.T) {
		if err := ch.ExchangeDeclare("int", "fanout", false, false, true, false, nil); err != nil {
			t.Fatal(err)
		}
		rqDeclareQueues(t, ch, "behind-int")
		rqBind(t, ch, "behind-int", "", "int", nil)
		rqPublishFails(t, conn, "int", "", 403, "ACCESS_REFUSED - cannot publish to internal exchange 'int' in vhost '/'")
		rqDeclareExchange(t, ch, "front", "direct", nil)
		rqBindX(t, ch, "int", "k", "front", nil)
		rqPublishBody(t, ch, "front", "k", "via-front")
		rqExpect(t, ch, map[string][]string{"behind-int": {"via-front"}})
	})

	t.Run("publish to missing exchange", func(t *testing.T) {
		rqPublishFails(t, conn, "nowhere", "", 404, "NOT_FOUND - no exchange 'nowhere' in vhost '/'")
	})
}

func TestExchangeDelete(t *testing.T) {
	_, conn, ch := rqStart(t)
	rqDeclareExchange(t, ch, "e", "direct", nil)
	rqDeclareQueues(t, ch, "q")
	rqBind(t, ch, "q", "k", "e", nil)
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
	rqDeclareExchange(t, ch, "dest", "fanout", nil)
	rqBindX(t, ch, "dest", "k", "amq.direct", nil)
	if err := ch.ExchangeDelete("dest", true, false); err != nil {
		t.Fatalf("if-unused delete of a destination-only exchange: %v", err)
	}

	// Deleting an exchange removes its bindings both ways: re-created, it
	// routes nowhere and nothing routes to it.
	rqDeclareExchange(t, ch, "mid", "fanout", nil)
	rqBindX(t, ch, "mid", "k", "amq.direct", nil)
	rqBind(t, ch, "q", "", "mid", nil)
	rqPublishBody(t, ch, "amq.direct", "k", "before")
	if err := ch.ExchangeDelete("mid", false, false); err != nil {
		t.Fatal(err)
	}
	rqDeclareExchange(t, ch, "mid", "fanout", nil)
	rqPublishBody(t, ch, "amq.direct", "k", "after-1")
	rqPublishBody(t, ch, "mid", "", "after-2")
	rqExpect(t, ch, map[string][]string{"q": {"before"}})
}

func TestExchangeToExchange(t *testing.T) {
	_, conn, ch := rqStart(t)

	t.Run("fanout to topic to queues", func(t *testing.T) {
		rqDeclareExchange(t, ch, "f", "fanout", nil)
		rqDeclareExchange(t, ch, "t", "topic", nil)
		rqBindX(t, ch, "t", "ignored", "f", nil)
		rqDeclareQueues(t, ch, "ta", "tall")
		rqBind(t, ch, "ta", "a.*", "t", nil)
		rqBind(t, ch, "tall", "#", "t", nil)
		rqPublishBody(t, ch, "f", "a.x", "m1")
		rqPublishBody(t, ch, "f", "b", "m2")
		rqExpect(t, ch, map[string][]string{"ta": {"m1"}, "tall": {"m1", "m2"}})
	})

	t.Run("direct chain uses the key at each hop", func(t *testing.T) {
		rqDeclareExchange(t, ch, "d1", "direct", nil)
		rqDeclareExchange(t, ch, "d2", "direct", nil)
		rqDeclareExchange(t, ch, "d3", "direct", nil)
		rqBindX(t, ch, "d2", "k", "d1", nil)
		rqBindX(t, ch, "d3", "k", "d2", nil)
		rqDeclareQueues(t, ch, "dq")
		rqBind(t, ch, "dq", "k", "d3", nil)
		rqBind(t, ch, "dq", "j", "d3", nil)
		rqPublishBody(t, ch, "d1", "k", "k")
		rqPublishBody(t, ch, "d1", "j", "j") // stops at d1
		rqPublishBody(t, ch, "d3", "j", "j-direct")
		rqExpect(t, ch, map[string][]string{"dq": {"k", "j-direct"}})
	})

	t.Run("cycle", func(t *testing.T) {
		rqDeclareExchange(t, ch, "c1", "fanout", nil)
		rqDeclareExchange(t, ch, "c2", "fanout", nil)
		rqDeclareExchange(t, ch, "c3", "fanout", nil)
		rqBindX(t, ch, "c2", "", "c1", nil)
		rqBindX(t, ch, "c3", "", "c2", nil)
		rqBindX(t, ch, "c1", "", "c3", nil)
		rqBindX(t, ch, "c1", "", "c1", nil) // self-loop
		rqDeclareQueues(t, ch, "cq1", "cq2")
		rqBind(t, ch, "cq1", "", "c1", nil)
		rqBind(t, ch, "cq1", "", "c3", nil) // reachable twice
		rqBind(t, ch, "cq2", "", "c2", nil)
		rqPublishBody(t, ch, "c2", "", "m")
		rqExpect(t, ch, map[string][]string{"cq1": {"m"}, "cq2": {"m"}})

		// exchange.unbind cuts the loop at c2 → c3.
		if err := ch.ExchangeUnbind("c3", "", "c2", false, nil); err != nil {
			t.Fatal(err)
		}
		rqPublishBody(t, ch, "c2", "", "after-unbind")
		rqPublishBody(t, ch, "c3", "", "from-c3")
		rqExpect(t, ch, map[string][]string{"cq1": {"from-c3"}, "cq2": {"after-unbind", "from-c3"}})
	})

	t.Run("duplicate bind is one binding", func(t *testing.T) {
		rqDeclareExchange(t, ch, "s", "direct", nil)
		rqDeclareExchange(t, ch, "x", "fanout", nil)
		rqBindX(t, ch, "x", "k", "s", nil)
		rqBindX(t, ch, "x", "k", "s", nil)
		rqDeclareQueues(t, ch, "xq")
		rqBind(t, ch, "xq", "", "x", nil)
		if err := ch.ExchangeUnbind("x", "k", "s", false, nil); err != nil {
			t.Fatal(err)
		}
		rqPublishBody(t, ch, "s", "k", "m")
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
	_, _, ch := rqStart(t)
	rqDeclareExchange(t, ch, "ae", "fanout", nil)
	rqDeclareExchange(t, ch, "main", "direct", amqp091.Table{"alternate-exchange": "ae"})
	rqDeclareQueues(t, ch, "qmain", "qae")
	rqBind(t, ch, "qmain", "k", "main", nil)
	rqBind(t, ch, "qae", "", "ae", nil)

	// AE chain: main2 → (no match) → ae2 (no bindings) → its AE ae3.
	rqDeclareExchange(t, ch, "ae3", "fanout", nil)
	rqDeclareExchange(t, ch, "ae2", "direct", amqp091.Table{"alternate-exchange": "ae3"})
	rqDeclareExchange(t, ch, "main2", "topic", amqp091.Table{"alternate-exchange": "ae2"})
	rqDeclareQueues(t, ch, "q3")
	rqBind(t, ch, "q3", "", "ae3", nil)

	// Missing AE: the message is unroutable.
	rqDeclareExchange(t, ch, "main3", "direct", amqp091.Table{"alternate-exchange": "does-not-exist"})

	returns := ch.NotifyReturn(make(chan amqp091.Return, 4))
	rqPublishMandatory(t, ch, "main", "k", true, amqp091.Publishing{Body: []byte("routable")})
	rqPublishMandatory(t, ch, "main", "z", true, amqp091.Publishing{Body: []byte("to-ae")})
	rqPublishMandatory(t, ch, "main2", "z", true, amqp091.Publishing{Body: []byte("to-ae3")})
	rqPublishMandatory(t, ch, "main3", "z", true, amqp091.Publishing{Body: []byte("lost")})
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
	_, conn, ch := rqStart(t)
	rqDeclareExchange(t, ch, "m", "direct", amqp091.Table{"alternate-exchange": "ae"})
	rqDeclareExchange(t, ch, "m", "direct", amqp091.Table{"alternate-exchange": "ae", "other": "ignored"})
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
