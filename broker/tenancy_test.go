// Tests of multi-tenancy: vhost limits, user limits and topic
// permissions, through amqp091-go against a real broker (on the store
// BROKERD_TEST_STORE picks). Helpers carry the tn prefix.

package broker_test

import (
	"errors"
	"fmt"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// tnStart starts a broker with guest and the users u and w (password
// "pw"), each with every permission in "/" and in the vhost "t".
func tnStart(t *testing.T) *brokertest.Instance {
	t.Helper()
	b := rqStartUsers(t, map[string][3]string{"u": {".*", ".*", ".*"}, "w": {".*", ".*", ".*"}})
	if err := b.Broker.PutVHost(broker.VHostInfo{Name: "t"}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"guest", "u", "w"} {
		if err := b.Broker.SetPermissions(u, "t", ".*", ".*", ".*"); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// tnConns waits until vhost has n connections open (a client's close
// returns before the broker has dropped the connection).
func tnConns(t *testing.T, b *brokertest.Instance, vhost string, n int) {
	t.Helper()
	brokertest.Eventually(t, fmt.Sprintf("%d connections in %s", n, vhost), func() bool { return len(b.Broker.Connections(vhost)) == n })
}

// The vhost's max-connections refuses connection.open past it with
// RabbitMQ's 530 and text (rabbit_reader), to every user, before the
// access check; a closed connection frees a place; 0 refuses all; a
// negative value is no limit; other vhosts are not affected.
func TestVHostConnectionLimit(t *testing.T) {
	b := tnStart(t)
	if err := b.Broker.SetVHostLimits("t", map[string]int64{"max-connections": 2}); err != nil {
		t.Fatal(err)
	}
	c1 := pmDial(t, b, "u", "pw", "t")
	pmDial(t, b, "w", "pw", "t")
	_, err := pmTryDial(b, "u", "pw", "t")
	rqWantErr(t, err, 530, "NOT_ALLOWED - access to vhost 't' refused for user 'u': connection limit (2) is reached")
	// A user with no access to the vhost meets the limit first, as in
	// RabbitMQ.
	if err := b.Broker.PutUser(broker.UserSpec{Name: "x", Password: "pw"}); err != nil {
		t.Fatal(err)
	}
	_, err = pmTryDial(b, "x", "pw", "t")
	rqWantErr(t, err, 530, "NOT_ALLOWED - access to vhost 't' refused for user 'x': connection limit (2) is reached")
	pmDial(t, b, "u", "pw", "/") // another vhost
	c1.Close()
	tnConns(t, b, "t", 1)
	pmDial(t, b, "u", "pw", "t")

	if err := b.Broker.SetVHostLimits("t", map[string]int64{"max-connections": 0}); err != nil {
		t.Fatal(err)
	}
	_, err = pmTryDial(b, "guest", "guest", "t")
	rqWantErr(t, err, 530, "NOT_ALLOWED - access to vhost 't' refused for user 'guest': connection limit (0) is reached")
	if err := b.Broker.SetVHostLimits("t", map[string]int64{"max-connections": -1}); err != nil {
		t.Fatal(err)
	}
	pmDial(t, b, "u", "pw", "t")
	if err := b.Broker.SetVHostLimit("t", "max-connections", 3); err != nil {
		t.Fatal(err)
	}
	_, err = pmTryDial(b, "u", "pw", "t")
	rqWantErr(t, err, 530, "NOT_ALLOWED - access to vhost 't' refused for user 'u': connection limit (3) is reached")
	if err := b.Broker.ClearVHostLimit("t", "max-connections"); err != nil {
		t.Fatal(err)
	}
	pmDial(t, b, "u", "pw", "t")
}

// The vhost's max-queues refuses a queue.declare of a new queue past it
// with RabbitMQ's 406 and text (rabbit_channel check_vhost_queue_limit);
// redeclaring a queue that exists is not refused; server-named and
// exclusive queues count; a deleted queue frees a place; 0 refuses all.
func TestVHostQueueLimit(t *testing.T) {
	b := tnStart(t)
	if err := b.Broker.SetVHostLimits("t", map[string]int64{"max-queues": 2}); err != nil {
		t.Fatal(err)
	}
	conn := pmDial(t, b, "u", "pw", "t")
	s := brokertest.NewSession(t, conn)
	s.Declare("q1", nil)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	s.Declare("q1", nil) // exists: not a new queue
	rqFails(t, conn, 406, "PRECONDITION_FAILED - cannot declare queue 'q3': queue limit in vhost 't' (2) is reached", func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("q3", true, false, false, false, nil)
		return err
	})
	// Other vhosts are not limited.
	brokertest.NewSession(t, pmDial(t, b, "u", "pw", "/")).Declare("q3", nil)
	if _, err := s.Channel.QueueDelete("q1", false, false, false); err != nil {
		t.Fatal(err)
	}
	s.Declare("q3", nil)
	if err := b.Broker.SetVHostLimits("t", map[string]int64{"max-queues": 0}); err != nil {
		t.Fatal(err)
	}
	rqFails(t, conn, 406, "PRECONDITION_FAILED - cannot declare queue 'q4': queue limit in vhost 't' (0) is reached", func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("q4", false, false, false, false, nil)
		return err
	})
	if err := b.Broker.ClearVHostLimit("t", ""); err != nil {
		t.Fatal(err)
	}
	s.Declare("q4", nil)
	if got, _ := b.Broker.VHostLimitsOf("t"); len(got) != 0 {
		t.Fatalf("limits after clearing all: %v", got)
	}
}

// The user's max-connections refuses connection.open past it, in every
// vhost together, with RabbitMQ's 530 and text.
func TestUserConnectionLimit(t *testing.T) {
	b := tnStart(t)
	if err := b.Broker.SetUserLimits("u", map[string]int64{"max-connections": 2}); err != nil {
		t.Fatal(err)
	}
	c1 := pmDial(t, b, "u", "pw", "t")
	pmDial(t, b, "u", "pw", "/")
	_, err := pmTryDial(b, "u", "pw", "/")
	rqWantErr(t, err, 530, "NOT_ALLOWED - connection refused for user 'u': user connection limit (2) is reached")
	pmDial(t, b, "w", "pw", "/") // another user
	c1.Close()
	tnConns(t, b, "t", 0)
	pmDial(t, b, "u", "pw", "t")
	if err := b.Broker.SetUserLimits("u", map[string]int64{"max-connections": 0}); err != nil {
		t.Fatal(err)
	}
	_, err = pmTryDial(b, "u", "pw", "t")
	rqWantErr(t, err, 530, "NOT_ALLOWED - connection refused for user 'u': user connection limit (0) is reached")
	if err := b.Broker.ClearUserLimit("u", "max-connections"); err != nil {
		t.Fatal(err)
	}
	pmDial(t, b, "u", "pw", "t")
}

// The user's max-channels refuses a channel.open past it, counting the
// channels of all its connections, with RabbitMQ's 530 (its reader
// closes the connection) and text; a closed channel frees a place.
func TestUserChannelLimit(t *testing.T) {
	b := tnStart(t)
	if err := b.Broker.SetUserLimits("u", map[string]int64{"max-channels": 2}); err != nil {
		t.Fatal(err)
	}
	c1 := pmDial(t, b, "u", "pw", "/")
	c2 := pmDial(t, b, "u", "pw", "t")
	if _, err := c1.Channel(); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Channel(); err != nil {
		t.Fatal(err)
	}
	// Another user's channels are its own.
	if _, err := pmDial(t, b, "w", "pw", "/").Channel(); err != nil {
		t.Fatal(err)
	}
	closed := c1.NotifyClose(make(chan *amqp091.Error, 1))
	_, err := c1.Channel()
	const refusal = "NOT_ALLOWED - number of channels opened for user 'u' has reached the maximum allowed user limit of (2)"
	rqWantErr(t, err, 530, refusal)
	if e := <-closed; e == nil || e.Code != 530 {
		t.Fatalf("connection closed with %v, want 530", e)
	}
	// The closed connection's channel is no longer counted.
	c3 := pmDial(t, b, "u", "pw", "/")
	ch3, err := c3.Channel()
	if err != nil {
		t.Fatalf("channel after the refused connection closed: %v", err)
	}
	if err := ch3.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c3.Channel(); err != nil {
		t.Fatalf("channel after one closed: %v", err)
	}
	if err := b.Broker.ClearUserLimit("u", "all"); err != nil {
		t.Fatal(err)
	}
	if _, err := c3.Channel(); err != nil {
		t.Fatalf("channel with no limit: %v", err)
	}
}

// Limits are refused with RabbitMQ's validation text when unknown, and
// for a vhost or user that does not exist.
func TestLimitsValidation(t *testing.T) {
	b := tnStart(t)
	var ie *broker.InvalidError
	err := b.Broker.SetVHostLimits("t", map[string]int64{"max-channels": 1})
	if !errors.As(err, &ie) || ie.Msg != `Unrecognised terms [{<<"max-channels">>,1}] in limits` {
		t.Fatalf("vhost max-channels: %v", err)
	}
	err = b.Broker.SetUserLimits("u", map[string]int64{"max-queues": 1})
	if !errors.As(err, &ie) || ie.Msg != `Unrecognised terms [{<<"max-queues">>,1}] in user-limits` {
		t.Fatalf("user max-queues: %v", err)
	}
	if err := b.Broker.SetVHostLimits("nosuch", map[string]int64{"max-queues": 1}); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("unknown vhost: %v", err)
	}
	if err := b.Broker.SetUserLimits("nosuch", map[string]int64{"max-channels": 1}); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("unknown user: %v", err)
	}
	var ie2 *broker.InvalidError
	if err := b.Broker.SetTopicPermissions("u", "t", "amq.topic", "(", ".*"); !errors.As(err, &ie2) {
		t.Fatalf("bad topic pattern: %v", err)
	}
}

// Topic permissions: a publish to a topic exchange is refused with 403
// and RabbitMQ's text when its routing key does not match the user's
// write pattern on that exchange, a queue.bind / queue.unbind /
// exchange.bind from it when the key does not match the read pattern;
// with no topic permission on the exchange, or on an exchange of another
// type, anything goes; "" matches only the empty key.
func TestTopicPermissions(t *testing.T) {
	b := tnStart(t)
	setup := brokertest.NewSession(t, pmDial(t, b, "guest", "guest", "t"))
	setup.Declare("q", nil)
	if err := setup.Channel.ExchangeDeclare("direct.x", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := setup.Channel.ExchangeDeclare("other.topic", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Broker.SetTopicPermissions("u", "t", "amq.topic", "^orders\\.", "^audit\\."); err != nil {
		t.Fatal(err)
	}
	if err := b.Broker.SetTopicPermissions("u", "t", "direct.x", "^never$", "^never$"); err != nil {
		t.Fatal(err)
	}
	if err := b.Broker.SetTopicPermissions("u", "t", "empty.topic", "", ""); err != nil {
		t.Fatal(err)
	}
	conn := pmDial(t, b, "u", "pw", "t")
	publish := func(x, key string) error {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		return pmPublish(x, key)(ch)
	}
	if err := publish("amq.topic", "orders.eu"); err != nil {
		t.Fatalf("allowed publish: %v", err)
	}
	rqWantErr(t, publish("amq.topic", "payments.eu"), 403, "ACCESS_REFUSED - access to topic 'payments.eu' in exchange 'amq.topic' in vhost 't' refused for user 'u'")
	if err := publish("other.topic", "anything"); err != nil {
		t.Fatalf("exchange without topic permissions: %v", err)
	}
	if err := publish("direct.x", "anything"); err != nil {
		t.Fatalf("direct exchange: %v", err)
	}
	// Read: binds and unbinds from the topic exchange.
	bind := func(key string) error {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		return ch.QueueBind("q", key, "amq.topic", false, nil)
	}
	if err := bind("audit.#"); err != nil {
		t.Fatalf("allowed bind: %v", err)
	}
	rqWantErr(t, bind("orders.#"), 403, "ACCESS_REFUSED - access to topic 'orders.#' in exchange 'amq.topic' in vhost 't' refused for user 'u'")
	if err := setup.Channel.QueueBind("q", "orders.#", "amq.topic", false, nil); err != nil {
		t.Fatal(err) // guest has no topic permissions
	}
	rqFails(t, conn, 403, "ACCESS_REFUSED - access to topic 'orders.#' in exchange 'amq.topic' in vhost 't' refused for user 'u'", func(ch *amqp091.Channel) error {
		return ch.QueueUnbind("q", "orders.#", "amq.topic", nil)
	})
	rqFails(t, conn, 403, "ACCESS_REFUSED - access to topic 'x' in exchange 'amq.topic' in vhost 't' refused for user 'u'", func(ch *amqp091.Channel) error {
		return ch.ExchangeBind("direct.x", "x", "amq.topic", false, nil)
	})
	rqFails(t, conn, 403, "ACCESS_REFUSED - access to topic 'audit.x' in exchange 'amq.topic' in vhost 't' refused for user 'u'", func(ch *amqp091.Channel) error {
		return pmPublish("amq.topic", "audit.x")(ch) // read does not give write
	})
	// "" is ^$.
	if err := setup.Channel.ExchangeDeclare("empty.topic", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := publish("empty.topic", ""); err != nil {
		t.Fatalf("empty key on an empty pattern: %v", err)
	}
	rqWantErr(t, publish("empty.topic", "a"), 403, "ACCESS_REFUSED - access to topic 'a' in exchange 'empty.topic' in vhost 't' refused for user 'u'")

	// A change applies to the open connection at once; clearing them
	// lifts the check.
	if err := b.Broker.SetTopicPermissions("u", "t", "amq.topic", "^payments\\.", ".*"); err != nil {
		t.Fatal(err)
	}
	if err := publish("amq.topic", "payments.eu"); err != nil {
		t.Fatalf("after the change: %v", err)
	}
	if err := b.Broker.ClearTopicPermissions("u", "t", ""); err != nil {
		t.Fatal(err)
	}
	if err := publish("amq.topic", "orders.eu"); err != nil {
		t.Fatalf("after clearing: %v", err)
	}
	if got := b.Broker.TopicPermissions(); len(got) != 0 {
		t.Fatalf("topic permissions after clearing: %v", got)
	}
}

// Variable expansion: {username} and {vhost} in a topic pattern are the
// connection's user and vhost (rabbit_channel build_topic_variable_map).
// {client_id} is left as written on an AMQP 0-9-1 connection, as in
// RabbitMQ 3.10, which fills it only for its MQTT and STOMP plugins'
// connections: a client_id client property changes nothing.
func TestTopicPermissionVariables(t *testing.T) {
	b := tnStart(t)
	for _, u := range []string{"u", "w"} {
		if err := b.Broker.SetTopicPermissions(u, "t", "amq.topic", "^{vhost}\\.{username}\\.", "^{username}$"); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Broker.SetTopicPermissions("u", "t", "cid.topic", "^{client_id}\\.", ".*"); err != nil {
		t.Fatal(err)
	}
	brokertest.NewSession(t, pmDial(t, b, "guest", "guest", "t")).Declare("q", nil)
	for _, u := range []string{"u", "w"} {
		conn := pmDial(t, b, u, "pw", "t")
		s := brokertest.NewSession(t, conn)
		if err := pmPublish("amq.topic", "t."+u+".x")(s.Channel); err != nil {
			t.Fatalf("%s publishing to its own key: %v", u, err)
		}
		other := map[string]string{"u": "w", "w": "u"}[u]
		rqFails(t, conn, 403, fmt.Sprintf("ACCESS_REFUSED - access to topic 't.%s.x' in exchange 'amq.topic' in vhost 't' refused for user '%s'", other, u), func(ch *amqp091.Channel) error {
			return pmPublish("amq.topic", "t."+other+".x")(ch)
		})
		if err := s.Channel.QueueBind("q", u, "amq.topic", false, nil); err != nil {
			t.Fatalf("%s binding its own key: %v", u, err)
		}
		rqFails(t, conn, 403, fmt.Sprintf("ACCESS_REFUSED - access to topic '%s' in exchange 'amq.topic' in vhost 't' refused for user '%s'", other, u), func(ch *amqp091.Channel) error {
			return ch.QueueBind("q", other, "amq.topic", false, nil)
		})
	}
	guest := brokertest.NewSession(t, pmDial(t, b, "guest", "guest", "t"))
	if err := guest.Channel.ExchangeDeclare("cid.topic", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	cfg := amqp091.Config{Properties: amqp091.Table{"client_id": "c1"}}
	conn, err := amqp091.DialConfig("amqp://u:pw@"+b.Addr+"/t", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rqFails(t, conn, 403, "ACCESS_REFUSED - access to topic 'c1.x' in exchange 'cid.topic' in vhost 't' refused for user 'u'", func(ch *amqp091.Channel) error {
		return pmPublish("cid.topic", "c1.x")(ch)
	})
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := pmPublish("cid.topic", "{client_id}.x")(ch); err != nil {
		t.Fatalf("the literal {client_id}: %v", err)
	}
}

// Limits and topic permissions are definitions: they survive a restart
// of the broker, and go with their vhost or user.
func TestTenancySurvivesRestart(t *testing.T) {
	b := tnStart(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.Broker.SetVHostLimits("t", map[string]int64{"max-connections": 1, "max-queues": 7}))
	must(b.Broker.SetUserLimits("u", map[string]int64{"max-connections": 3, "max-channels": 1}))
	must(b.Broker.SetTopicPermissions("u", "t", "amq.topic", "^a\\.", "^b\\."))
	must(b.Broker.SetTopicPermissions("w", "t", "amq.topic", "^w", ""))
	must(b.Broker.PutVHost(broker.VHostInfo{Name: "gone"}))
	must(b.Broker.SetVHostLimits("gone", map[string]int64{"max-queues": 1}))
	must(b.Broker.SetTopicPermissions("u", "gone", "amq.topic", "x", "x"))
	must(b.Broker.DeleteVHost("gone"))
	must(b.Broker.DeleteUser("w"))
	b.Restart()
	if got, want := fmt.Sprint(b.Broker.VHostLimits()), "[{t map[max-connections:1 max-queues:7]}]"; got != want {
		t.Fatalf("vhost limits after restart: %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(b.Broker.UserLimits()), "[{u map[max-channels:1 max-connections:3]}]"; got != want {
		t.Fatalf("user limits after restart: %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(b.Broker.TopicPermissions()), "[{u t amq.topic ^a\\. ^b\\.}]"; got != want {
		t.Fatalf("topic permissions after restart: %s, want %s", got, want)
	}
	// And they are enforced.
	conn := pmDial(t, b, "u", "pw", "t")
	_, err := pmTryDial(b, "guest", "guest", "t")
	rqWantErr(t, err, 530, "NOT_ALLOWED - access to vhost 't' refused for user 'guest': connection limit (1) is reached")
	rqFails(t, conn, 403, "ACCESS_REFUSED - access to topic 'b.x' in exchange 'amq.topic' in vhost 't' refused for user 'u'", func(ch *amqp091.Channel) error {
		return pmPublish("amq.topic", "b.x")(ch)
	})
	// A closed connection frees its place.
	conn.Close()
	tnConns(t, b, "t", 0)
	conn = pmDial(t, b, "u", "pw", "t")
	if _, err := conn.Channel(); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Channel()
	rqWantErr(t, err, 530, "NOT_ALLOWED - number of channels opened for user 'u' has reached the maximum allowed user limit of (1)")
}
