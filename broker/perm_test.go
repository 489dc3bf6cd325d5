// Tests of permissions: every AMQP operation checks what rabbit_channel checks, in its order.

package broker_test

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// Permission tests: each AMQP operation checks the permissions
// rabbit_channel checks, in its order, with its codes. Helpers carry the
// pm prefix (rqStartUsers and rqDialAs are shared with other files).

// rqStartUsers starts a broker with guest (full permissions) and the given
// extra users (password "pw"), then sets their permissions in "/".
func rqStartUsers(t *testing.T, perms map[string][3]string) *brokertest.Instance {
	t.Helper()
	users := []broker.UserSpec{{Name: "guest", Password: "guest", Tags: []string{"administrator"}}}
	for u := range perms {
		users = append(users, broker.UserSpec{Name: u, Password: "pw"})
	}
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Users: users}})
	for u, p := range perms {
		if err := b.Broker.SetPermissions(u, "/", p[0], p[1], p[2]); err != nil {
			t.Fatalf("set permissions of %s: %v", u, err)
		}
	}
	return b
}

// rqDialAs connects to "/" as user (password "pw").
func rqDialAs(t *testing.T, b *brokertest.Instance, user string) *amqp091.Connection {
	t.Helper()
	return pmDial(t, b, user, "pw", "/")
}

// pmDial connects to vhost as user; the connection closes when the test
// ends.
func pmDial(t *testing.T, b *brokertest.Instance, user, password, vhost string) *amqp091.Connection {
	t.Helper()
	c, err := pmTryDial(b, user, password, vhost)
	if err != nil {
		t.Fatalf("dial %s as %s: %v", vhost, user, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func pmTryDial(b *brokertest.Instance, user, password, vhost string) (*amqp091.Connection, error) {
	return amqp091.Dial("amqp://" + url.UserPassword(user, password).String() + "@" + b.Addr + "/" + url.PathEscape(vhost))
}

// pmNeed is one permission an operation needs: kind (configure, write,
// read) on a resource.
type pmNeed struct{ kind, resource, name string }

func (n pmNeed) refusal(vhost, user string) string {
	return fmt.Sprintf("ACCESS_REFUSED - %s access to %s '%s' in vhost '%s' refused for user '%s'", n.kind, n.resource, n.name, vhost, user)
}

// pmGrant returns the configure, write and read patterns that allow
// exactly needs, except skip (no pattern allows anything else).
func pmGrant(needs []pmNeed, skip int) [3]string {
	var alts [3][]string
	for i, n := range needs {
		if i == skip {
			continue
		}
		k := map[string]int{"configure": 0, "write": 1, "read": 2}[n.kind]
		alts[k] = append(alts[k], "^"+strings.ReplaceAll(n.name, ".", `\.`)+"$")
	}
	var out [3]string
	for k, a := range alts {
		out[k] = strings.Join(a, "|")
	}
	return out
}

// pmOp is an operation on a channel of the user's connection. A publish
// returns once it is confirmed or its channel is closed.
type pmOp func(ch *amqp091.Channel) error

func pmPublish(exchange, key string) pmOp {
	return func(ch *amqp091.Channel) error {
		if err := ch.Confirm(false); err != nil {
			return err
		}
		return brokertest.TryPublish(ch, exchange, key, amqp091.Publishing{Body: []byte("m")})
	}
}

// TestPermissionsPerOperation: every operation that needs a permission is
// refused with 403 ACCESS_REFUSED and RabbitMQ's text when any one of the
// permissions it needs is missing, and works with exactly those (nothing
// else is checked). Each case runs in its own vhost, set up by guest.
func TestPermissionsPerOperation(t *testing.T) {
	declareQ := func(name string, args amqp091.Table) pmOp {
		return func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare(name, false, false, false, false, args)
			return err
		}
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, admin *brokertest.Session)
		op    pmOp
		needs []pmNeed
		// check runs as guest after the operation worked.
		check func(t *testing.T, admin *amqp091.Connection)
	}{
		{
			name: "exchange.declare",
			op: func(ch *amqp091.Channel) error {
				return ch.ExchangeDeclare("x", "direct", false, false, false, false, nil)
			},
			needs: []pmNeed{{"configure", "exchange", "x"}},
			check: func(t *testing.T, admin *amqp091.Connection) {
				if !rqExchangeExists(t, admin, "x") {
					t.Error("x not declared")
				}
			},
		},
		{
			name: "exchange.declare alternate-exchange",
			op: func(ch *amqp091.Channel) error {
				return ch.ExchangeDeclare("x", "direct", false, false, false, false, amqp091.Table{"alternate-exchange": "ae"})
			},
			needs: []pmNeed{{"configure", "exchange", "x"}, {"read", "exchange", "x"}, {"write", "exchange", "ae"}},
		},
		{
			name:  "exchange.declare passive",
			setup: func(t *testing.T, admin *brokertest.Session) { admin.DeclareExchange("x", "direct", nil) },
			op: func(ch *amqp091.Channel) error {
				return ch.ExchangeDeclarePassive("x", "direct", false, false, false, false, nil)
			},
		},
		{
			name:  "exchange.delete",
			setup: func(t *testing.T, admin *brokertest.Session) { admin.DeclareExchange("x", "direct", nil) },
			op:    func(ch *amqp091.Channel) error { return ch.ExchangeDelete("x", false, false) },
			needs: []pmNeed{{"configure", "exchange", "x"}},
			check: func(t *testing.T, admin *amqp091.Connection) {
				if rqExchangeExists(t, admin, "x") {
					t.Error("x not deleted")
				}
			},
		},
		{
			name:  "queue.declare",
			op:    declareQ("q", nil),
			needs: []pmNeed{{"configure", "queue", "q"}},
			check: func(t *testing.T, admin *amqp091.Connection) {
				if _, err := rqPassiveQueue(admin, "q"); err != nil {
					t.Errorf("q not declared: %v", err)
				}
			},
		},
		{
			// B63: read on the queue, write on the dead letter exchange.
			name:  "queue.declare x-dead-letter-exchange",
			op:    declareQ("q", amqp091.Table{"x-dead-letter-exchange": "dlx"}),
			needs: []pmNeed{{"configure", "queue", "q"}, {"read", "queue", "q"}, {"write", "exchange", "dlx"}},
		},
		{
			name:  "queue.declare x-dead-letter-exchange default",
			op:    declareQ("q", amqp091.Table{"x-dead-letter-exchange": ""}),
			needs: []pmNeed{{"configure", "queue", "q"}, {"read", "queue", "q"}, {"write", "exchange", "amq.default"}},
		},
		{
			name:  "queue.declare passive",
			setup: func(t *testing.T, admin *brokertest.Session) { admin.Declare("q", nil) },
			op: func(ch *amqp091.Channel) error {
				_, err := ch.QueueDeclarePassive("q", false, false, false, false, nil)
				return err
			},
		},
		{
			name:  "queue.delete",
			setup: func(t *testing.T, admin *brokertest.Session) { admin.Declare("q", nil) },
			op: func(ch *amqp091.Channel) error {
				_, err := ch.QueueDelete("q", false, false, false)
				return err
			},
			needs: []pmNeed{{"configure", "queue", "q"}},
			check: func(t *testing.T, admin *amqp091.Connection) {
				if _, err := rqPassiveQueue(admin, "q"); err == nil {
					t.Error("q not deleted")
				}
			},
		},
		{
			name: "queue.purge",
			setup: func(t *testing.T, admin *brokertest.Session) {
				admin.Declare("q", nil)
				admin.PublishBodies("q", "m")
			},
			op: func(ch *amqp091.Channel) error {
				_, err := ch.QueuePurge("q", false)
				return err
			},
			needs: []pmNeed{{"read", "queue", "q"}},
			check: func(t *testing.T, admin *amqp091.Connection) {
				if q, err := rqPassiveQueue(admin, "q"); err != nil || q.Messages != 0 {
					t.Errorf("q after purge: %+v, %v", q, err)
				}
			},
		},
		{
			name: "queue.bind",
			setup: func(t *testing.T, admin *brokertest.Session) {
				admin.Declare("q", nil)
				admin.DeclareExchange("x", "direct", nil)
			},
			op:    func(ch *amqp091.Channel) error { return ch.QueueBind("q", "k", "x", false, nil) },
			needs: []pmNeed{{"write", "queue", "q"}, {"read", "exchange", "x"}},
			check: func(t *testing.T, admin *amqp091.Connection) {
				ch := brokertest.NewSession(t, admin)
				ch.Publish("x", "k", amqp091.Publishing{Body: []byte("routed")})
				rqExpect(t, ch, map[string][]string{"q": {"routed"}})
			},
		},
		{
			name: "queue.unbind",
			setup: func(t *testing.T, admin *brokertest.Session) {
				admin.Declare("q", nil)
				admin.DeclareExchange("x", "direct", nil)
				admin.Bind("q", "k", "x", nil)
			},
			op:    func(ch *amqp091.Channel) error { return ch.QueueUnbind("q", "k", "x", nil) },
			needs: []pmNeed{{"write", "queue", "q"}, {"read", "exchange", "x"}},
		},
		{
			name: "exchange.bind",
			setup: func(t *testing.T, admin *brokertest.Session) {
				admin.DeclareExchange("src", "direct", nil)
				admin.DeclareExchange("dst", "fanout", nil)
			},
			op:    func(ch *amqp091.Channel) error { return ch.ExchangeBind("dst", "k", "src", false, nil) },
			needs: []pmNeed{{"write", "exchange", "dst"}, {"read", "exchange", "src"}},
		},
		{
			name: "exchange.unbind",
			setup: func(t *testing.T, admin *brokertest.Session) {
				admin.DeclareExchange("src", "direct", nil)
				admin.DeclareExchange("dst", "fanout", nil)
				admin.BindExchange("dst", "k", "src", nil)
			},
			op:    func(ch *amqp091.Channel) error { return ch.ExchangeUnbind("dst", "k", "src", false, nil) },
			needs: []pmNeed{{"write", "exchange", "dst"}, {"read", "exchange", "src"}},
		},
		{
			name: "basic.publish",
			setup: func(t *testing.T, admin *brokertest.Session) {
				admin.Declare("q", nil)
				admin.Bind("q", "k", "amq.direct", nil)
			},
			op:    pmPublish("amq.direct", "k"),
			needs: []pmNeed{{"write", "exchange", "amq.direct"}},
			check: func(t *testing.T, admin *amqp091.Connection) {
				rqExpect(t, brokertest.NewSession(t, admin), map[string][]string{"q": {"m"}})
			},
		},
		{
			name:  "basic.publish default exchange",
			setup: func(t *testing.T, admin *brokertest.Session) { admin.Declare("q", nil) },
			op:    pmPublish("", "q"),
			needs: []pmNeed{{"write", "exchange", "amq.default"}},
			check: func(t *testing.T, admin *amqp091.Connection) {
				rqExpect(t, brokertest.NewSession(t, admin), map[string][]string{"q": {"m"}})
			},
		},
		{
			name:  "basic.consume",
			setup: func(t *testing.T, admin *brokertest.Session) { admin.Declare("q", nil) },
			op: func(ch *amqp091.Channel) error {
				_, err := ch.Consume("q", "", true, false, false, false, nil)
				return err
			},
			needs: []pmNeed{{"read", "queue", "q"}},
		},
		{
			name: "basic.get",
			setup: func(t *testing.T, admin *brokertest.Session) {
				admin.Declare("q", nil)
				admin.PublishBodies("q", "m")
			},
			op: func(ch *amqp091.Channel) error {
				d, ok, err := ch.Get("q", true)
				if err == nil && (!ok || string(d.Body) != "m") {
					err = fmt.Errorf("get: ok=%v body %q, want m", ok, d.Body)
				}
				return err
			},
			needs: []pmNeed{{"read", "queue", "q"}},
		},
	}
	b := brokertest.Start(t, brokertest.Config{})
	if err := b.Broker.PutUser(broker.UserSpec{Name: "u", Password: "pw"}); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vhost := fmt.Sprintf("/perm-%d", i)
			if err := b.Broker.PutVHost(broker.VHostInfo{Name: vhost}); err != nil {
				t.Fatal(err)
			}
			if err := b.Broker.SetPermissions("guest", vhost, ".*", ".*", ".*"); err != nil {
				t.Fatal(err)
			}
			admin := pmDial(t, b, "guest", "guest", vhost)
			if c.setup != nil {
				c.setup(t, brokertest.NewSession(t, admin))
			}
			// The user may connect (a permission record, even of empty
			// patterns, grants the vhost) and is refused each missing
			// permission.
			for skip, n := range c.needs {
				g := pmGrant(c.needs, skip)
				if err := b.Broker.SetPermissions("u", vhost, g[0], g[1], g[2]); err != nil {
					t.Fatal(err)
				}
				ch, err := pmDial(t, b, "u", "pw", vhost).Channel()
				if err != nil {
					t.Fatal(err)
				}
				err = c.op(ch)
				var ae *amqp091.Error
				if !errors.As(err, &ae) || ae.Code != amqp091.AccessRefused || ae.Reason != n.refusal(vhost, "u") {
					t.Fatalf("without %s on %s '%s': %v, want 403 %q", n.kind, n.resource, n.name, err, n.refusal(vhost, "u"))
				}
			}
			g := pmGrant(c.needs, -1)
			if err := b.Broker.SetPermissions("u", vhost, g[0], g[1], g[2]); err != nil {
				t.Fatal(err)
			}
			ch, err := pmDial(t, b, "u", "pw", vhost).Channel()
			if err != nil {
				t.Fatal(err)
			}
			if err := c.op(ch); err != nil {
				t.Fatalf("with %q: %v", g, err)
			}
			if c.check != nil {
				c.check(t, admin)
			}
		})
	}
}

// B63: a new queue with x-dead-letter-exchange needs read on itself and
// write on the DLX; nothing is created when refused; an existing queue
// redeclared with the same argument is not checked; a DLX set by policy
// is not checked (TestDLXPolicyDLXNotPermissionChecked).
func TestPermissionsDeadLetterExchange(t *testing.T) {
	b := rqStartUsers(t, map[string][3]string{"d": {".*", "^d-", "^d-"}})
	conn := rqDialAs(t, b, "d")
	declare := func(name string, args amqp091.Table) func(ch *amqp091.Channel) error {
		return func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare(name, false, false, false, false, args)
			return err
		}
	}
	dlx := func(x string) amqp091.Table { return amqp091.Table{"x-dead-letter-exchange": x} }
	rqFails(t, conn, 403, "ACCESS_REFUSED - write access to exchange 'dlx' in vhost '/' refused for user 'd'", declare("d-q", dlx("dlx")))
	rqFails(t, conn, 403, "ACCESS_REFUSED - read access to queue 'x-q' in vhost '/' refused for user 'd'", declare("x-q", dlx("d-dlx")))
	rqFails(t, conn, 403, "ACCESS_REFUSED - write access to exchange 'amq.default' in vhost '/' refused for user 'd'", declare("d-q", dlx("")))
	// The permission comes before the validation of the other arguments,
	// and the DLX's type before the permission (rabbit_channel's order).
	rqFails(t, conn, 403, "ACCESS_REFUSED - write access to exchange 'dlx' in vhost '/' refused for user 'd'",
		declare("d-q", amqp091.Table{"x-dead-letter-exchange": "dlx", "x-max-length": int32(-1)}))
	rqFails(t, conn, 406, "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'x-q' in vhost '/'",
		declare("x-q", amqp091.Table{"x-dead-letter-exchange": int32(5)}))
	for _, name := range []string{"d-q", "x-q"} {
		_, err := rqPassiveQueue(conn, name)
		rqWantErr(t, err, 404, "NOT_FOUND - no queue '"+name+"' in vhost '/'")
	}
	ch := brokertest.NewSession(t, conn)
	if err := declare("d-q", dlx("d-dlx"))(ch.Channel); err != nil {
		t.Fatalf("declare with permitted DLX: %v", err)
	}
	// Without a DLX, read on the queue is not needed.
	if err := declare("x-q", nil)(ch.Channel); err != nil {
		t.Fatalf("declare without DLX: %v", err)
	}
	// Only new queues are checked: redeclaring one that exists is not.
	admin := brokertest.NewSession(t, b.Dial(t))
	if err := declare("g-q", dlx("dlx"))(admin.Channel); err != nil {
		t.Fatal(err)
	}
	if err := declare("g-q", dlx("dlx"))(ch.Channel); err != nil {
		t.Fatalf("redeclare of an existing queue with a DLX: %v", err)
	}
}

func TestPermissionsAlternateExchange(t *testing.T) {
	b := rqStartUsers(t, map[string][3]string{"d": {".*", "^d-", "^d-"}})
	conn := rqDialAs(t, b, "d")
	declare := func(name, ae string) func(ch *amqp091.Channel) error {
		return func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclare(name, "direct", false, false, false, false, amqp091.Table{"alternate-exchange": ae})
		}
	}
	// A new exchange with an alternate needs read on itself and write on
	// the alternate (rabbit_channel exchange.declare).
	rqFails(t, conn, 403, "ACCESS_REFUSED - read access to exchange 'x-e' in vhost '/' refused for user 'd'", declare("x-e", "d-ae"))
	rqFails(t, conn, 403, "ACCESS_REFUSED - write access to exchange 'ae' in vhost '/' refused for user 'd'", declare("d-e", "ae"))
	if rqExchangeExists(t, conn, "d-e") || rqExchangeExists(t, conn, "x-e") {
		t.Fatal("refused exchange was created")
	}
	if err := declare("d-e", "d-ae")(brokertest.NewSession(t, conn).Channel); err != nil {
		t.Fatalf("declare with permitted alternate: %v", err)
	}
	// Without an alternate, read is not needed.
	brokertest.NewSession(t, conn).DeclareExchange("x-e", "direct", nil)
}

// Checks come in rabbit_channel's order (verified against RabbitMQ
// 3.10.8): the reserved amq.* prefix before the configure permission (and
// for an existing queue too), write on a binding's destination before the
// default exchange is refused, a reused consumer tag before read.
func TestPermissionsCheckOrder(t *testing.T) {
	b := rqStartUsers(t, map[string][3]string{"u": {"^x", "^x", "^x"}})
	conn := rqDialAs(t, b, "u")
	rqFails(t, conn, 403, "ACCESS_REFUSED - queue name 'amq.foo' contains reserved prefix 'amq.*'", func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("amq.foo", false, false, false, false, nil)
		return err
	})
	rqFails(t, conn, 403, "ACCESS_REFUSED - write access to queue 'q' in vhost '/' refused for user 'u'", func(ch *amqp091.Channel) error {
		return ch.QueueBind("q", "k", "", false, nil)
	})
	brokertest.NewSession(t, conn).Declare("xq", nil)
	rqFails(t, conn, 403, "ACCESS_REFUSED - operation not permitted on the default exchange", func(ch *amqp091.Channel) error {
		return ch.QueueBind("xq", "k", "", false, nil)
	})
	rqFails(t, conn, 403, "ACCESS_REFUSED - write access to exchange 'amq.default' in vhost '/' refused for user 'u'", func(ch *amqp091.Channel) error {
		return ch.ExchangeBind("", "k", "xsrc", false, nil)
	})
	rqFails(t, conn, 403, "ACCESS_REFUSED - operation not permitted on the default exchange", func(ch *amqp091.Channel) error {
		return ch.ExchangeBind("xd", "k", "", false, nil)
	})
	rqFails(t, conn, 530, "NOT_ALLOWED - attempt to reuse consumer tag 't'", func(ch *amqp091.Channel) error {
		if _, err := ch.Consume("xq", "t", true, false, false, false, nil); err != nil {
			return err
		}
		_, err := ch.Consume("q", "t", true, false, false, false, nil)
		return err
	})

	admin := brokertest.NewSession(t, b.Dial(t))
	q, err := admin.QueueDeclare("", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.QueueDeclare(q.Name, false, false, false, false, nil)
	rqWantErr(t, err, 403, "ACCESS_REFUSED - queue name '"+q.Name+"' contains reserved prefix 'amq.*'")
}

// Permission changes apply to open connections at once; the connections
// stay open (RabbitMQ keeps them open too, with a per-channel cache of up
// to 12 rights checked before: brokerd's is stricter).
func TestPermissionsChangeOpenConnections(t *testing.T) {
	b := rqStartUsers(t, map[string][3]string{"u": {".*", ".*", ".*"}})
	conn := rqDialAs(t, b, "u")
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	brokertest.NewSession(t, conn).Declare("a", nil)
	if err := b.Broker.SetPermissions("u", "/", "^b$", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	rqFails(t, conn, 403, "ACCESS_REFUSED - configure access to queue 'a' in vhost '/' refused for user 'u'", func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("a", false, false, false, false, nil)
		return err
	})
	brokertest.NewSession(t, conn).Declare("b", nil)
	if err := b.Broker.ClearPermissions("u", "/"); err != nil {
		t.Fatal(err)
	}
	rqFails(t, conn, 403, "ACCESS_REFUSED - read access to queue 'b' in vhost '/' refused for user 'u'", func(ch *amqp091.Channel) error {
		_, _, err := ch.Get("b", true)
		return err
	})
	select {
	case e := <-closed:
		t.Fatalf("connection closed: %v", e)
	default:
	}
	// A new connection is refused the vhost.
	_, err := pmTryDial(b, "u", "pw", "/")
	rqWantErr(t, err, 530, "NOT_ALLOWED - access to vhost '/' refused for user 'u'")
	if err := b.Broker.ClearPermissions("u", "/"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("clear of absent permissions: %v, want ErrNotFound", err)
	}
}

func TestSetPermissionsErrors(t *testing.T) {
	b := rqStartUsers(t, map[string][3]string{"u": {".*", ".*", ".*"}})
	for _, c := range []struct {
		user, vhost, configure string
		notFound               bool
		want                   string
	}{
		{"nobody", "/", ".*", true, "no user 'nobody'"},
		{"u", "/nope", ".*", true, "no vhost '/nope'"},
		{"u", "/", "(", false, "invalid_regexp: \"(\": missing closing ): `(`"},
	} {
		err := b.Broker.SetPermissions(c.user, c.vhost, c.configure, ".*", ".*")
		var inv *broker.InvalidError
		switch {
		case err == nil || !strings.HasPrefix(err.Error(), c.want):
			t.Errorf("SetPermissions(%q, %q, %q) = %v, want %q…", c.user, c.vhost, c.configure, err, c.want)
		case c.notFound != errors.Is(err, broker.ErrNotFound), !c.notFound && !errors.As(err, &inv):
			t.Errorf("SetPermissions(%q, %q, %q) = %#v: wrong kind of error", c.user, c.vhost, c.configure, err)
		}
	}
	// The failed calls changed nothing: u still has full permissions.
	brokertest.NewSession(t, rqDialAs(t, b, "u")).Declare("q1", nil)
	want := []broker.PermissionInfo{
		{User: "guest", VHost: "/", Configure: ".*", Write: ".*", Read: ".*"},
		{User: "u", VHost: "/", Configure: ".*", Write: ".*", Read: ".*"},
	}
	if got := b.Broker.Permissions(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Permissions() = %+v, want %+v", got, want)
	}
}
