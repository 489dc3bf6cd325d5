// Tests of vhosts: refusals, creation, deletion and their durability.

package broker_test

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/store"
)

// Vhosts, and the durability of users, permissions and vhosts. Helpers
// carry the vh prefix.

// vhEqual compares vhost lists.
func vhEqual(a, b []broker.VHostInfo) bool {
	return slices.EqualFunc(a, b, func(x, y broker.VHostInfo) bool {
		return x.Name == y.Name && x.Description == y.Description && x.DefaultQueueType == y.DefaultQueueType && slices.Equal(x.Tags, y.Tags)
	})
}

// vhStored returns the keys of the definition records that contain s.
func vhStored(t *testing.T, st store.Store, s string) []string {
	t.Helper()
	var keys []string
	if err := st.ScanMeta("", func(k string, _ []byte) bool {
		if strings.Contains(k, s) {
			keys = append(keys, k)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// vhStoredEntries counts the entries of every queue in the store.
func vhStoredEntries(t *testing.T, st store.Store) int {
	t.Helper()
	n := 0
	if err := st.Queues(func(_ store.QueueID, qs store.QueueState) bool {
		for _, l := range qs.Levels {
			n += int(l.Count)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// Connection refusals, as RabbitMQ 3.10.8 sends them (checked with
// amqp091-go against it): 530 NOT_ALLOWED for an unknown vhost and for a
// vhost the user has no permissions in.
func TestVHostConnectionRefusals(t *testing.T) {
	b := rqStartUsers(t, map[string][3]string{"u": {".*", ".*", ".*"}})
	if err := b.Broker.PutVHost(broker.VHostInfo{Name: "/other"}); err != nil {
		t.Fatal(err)
	}
	_, err := pmTryDial(b, "u", "pw", "/nosuch")
	rqWantErr(t, err, 530, "NOT_ALLOWED - vhost /nosuch not found")
	_, err = pmTryDial(b, "u", "pw", "/other")
	rqWantErr(t, err, 530, "NOT_ALLOWED - access to vhost '/other' refused for user 'u'")
	if err := b.Broker.SetPermissions("u", "/other", "", "", ""); err != nil {
		t.Fatal(err)
	}
	pmDial(t, b, "u", "pw", "/other") // empty patterns still grant the vhost
}

func TestPutVHost(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for _, v := range []broker.VHostInfo{
		{Name: "/b", Description: "bee", DefaultQueueType: "quorum", Tags: []string{"x", "", "y", "x"}},
		{Name: "/a", DefaultQueueType: "undefined"},
	} {
		if err := b.Broker.PutVHost(v); err != nil {
			t.Fatal(err)
		}
	}
	want := []broker.VHostInfo{
		{Name: "/", Description: "Default virtual host"},
		{Name: "/a"},
		{Name: "/b", Description: "bee", DefaultQueueType: "quorum", Tags: []string{"x", "y"}},
	}
	if got := b.Broker.VHosts(); !vhEqual(got, want) {
		t.Fatalf("VHosts() = %+v, want %+v", got, want)
	}
	// An update changes the metadata only: the vhost's queues stay.
	if err := b.Broker.SetPermissions("guest", "/b", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	brokertest.NewSession(t, pmDial(t, b, "guest", "guest", "/b")).Declare("q", nil)
	if err := b.Broker.PutVHost(broker.VHostInfo{Name: "/b", Description: "bee 2"}); err != nil {
		t.Fatal(err)
	}
	want[2] = broker.VHostInfo{Name: "/b", Description: "bee 2"}
	if got := b.Broker.VHosts(); !vhEqual(got, want) {
		t.Fatalf("after update VHosts() = %+v, want %+v", got, want)
	}
	if _, err := rqPassiveQueue(pmDial(t, b, "guest", "guest", "/b"), "q"); err != nil {
		t.Fatalf("queue of an updated vhost: %v", err)
	}
	for _, c := range []struct {
		info broker.VHostInfo
		want string
	}{
		{broker.VHostInfo{}, "vhost name must not be empty"},
		{broker.VHostInfo{Name: "/c", DefaultQueueType: "bogus"}, "unsupported default queue type 'bogus' for vhost '/c': want classic, quorum or stream"},
	} {
		var inv *broker.InvalidError
		if err := b.Broker.PutVHost(c.info); !errors.As(err, &inv) || inv.Msg != c.want {
			t.Errorf("PutVHost(%+v) = %v, want InvalidError %q", c.info, err, c.want)
		}
	}
	if got := b.Broker.VHosts(); !vhEqual(got, want) {
		t.Fatalf("refused PutVHost changed the vhosts: %+v", got)
	}
	if err := b.Broker.DeleteVHost("/nosuch"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("DeleteVHost of an unknown vhost: %v, want ErrNotFound", err)
	}
}

// DeleteVHost closes the vhost's connections with 320 CONNECTION_FORCED
// and RabbitMQ's text and removes everything of it: queues with their
// stored messages, exchanges, bindings, policies, permissions. Nothing of
// it comes back when a vhost of the same name is created, nor after a
// restart; other vhosts are untouched.
func TestDeleteVHost(t *testing.T) {
	const vh = "/doomed"
	b := rqStartUsers(t, map[string][3]string{"u": {".*", ".*", ".*"}})
	if err := b.Broker.PutVHost(broker.VHostInfo{Name: vh, Description: "d"}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"guest", "u"} {
		if err := b.Broker.SetPermissions(u, vh, ".*", ".*", ".*"); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Broker.SetPolicy(vh, broker.Policy{Name: "p", Pattern: "^dq", Definition: map[string]any{"max-length": 10}}); err != nil {
		t.Fatal(err)
	}
	admin := pmDial(t, b, "guest", "guest", vh)
	ch := brokertest.NewSession(t, admin)
	for _, q := range []string{"dq", "dq2"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.ExchangeDeclare("dx", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("dx2", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch.Bind("dq", "k", "dx", nil)
	ch.BindExchange("dx2", "k", "dx", nil)
	ch.Bind("dq2", "", "dx2", nil)
	for range 3 {
		ch.Publish("dx", "k", amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("m")})
	}
	if _, err := ch.Consume("dq", "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// A queue in "/" stays, with its connection.
	other := b.Dial(t)
	oclosed := other.NotifyClose(make(chan *amqp091.Error, 1))
	och := brokertest.NewSession(t, other)
	if _, err := och.QueueDeclare("keep", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if n := vhStoredEntries(t, b.Store); n != 6 {
		t.Fatalf("%d entries stored before the deletion, want 6", n)
	}

	// A record of a per-vhost kind the broker does not hold in memory
	// (as a kind added later would be) goes too: the store is scanned.
	var stray broker.DefsForTest
	stray.Policy(vh, "stray", ".*", map[string]any{"max-length": 1})
	errc := make(chan error, 1)
	b.Store.Apply(&store.Batch{Meta: stray.Ops()}, func(err error) { errc <- err })
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	closed := []chan *amqp091.Error{
		admin.NotifyClose(make(chan *amqp091.Error, 1)),
		pmDial(t, b, "u", "pw", vh).NotifyClose(make(chan *amqp091.Error, 1)),
	}
	if err := b.Broker.DeleteVHost(vh); err != nil {
		t.Fatal(err)
	}
	for _, c := range closed {
		rqWantErr(t, <-c, 320, "CONNECTION_FORCED - vhost '/doomed' is deleted")
	}
	check := func(when string) {
		t.Helper()
		if keys := vhStored(t, b.Store, "doomed"); len(keys) != 0 {
			t.Fatalf("%s: records of the deleted vhost stored: %q", when, keys)
		}
		if n := vhStoredEntries(t, b.Store); n != 0 {
			t.Fatalf("%s: %d entries stored, want none", when, n)
		}
		for _, v := range b.Broker.VHosts() {
			if v.Name == vh {
				t.Fatalf("%s: deleted vhost listed", when)
			}
		}
		for _, p := range b.Broker.Permissions() {
			if p.VHost == vh {
				t.Fatalf("%s: permissions of the deleted vhost remain: %+v", when, p)
			}
		}
		_, err := pmTryDial(b, "u", "pw", vh)
		rqWantErr(t, err, 530, "NOT_ALLOWED - vhost /doomed not found")
	}
	check("after delete")
	select {
	case e := <-oclosed:
		t.Fatalf("connection to another vhost closed: %v", e)
	default:
	}
	if _, err := rqPassiveQueue(other, "keep"); err != nil {
		t.Fatalf("queue of another vhost: %v", err)
	}

	b.Restart()
	check("after restart")
	// Created again, the vhost is empty.
	if err := b.Broker.PutVHost(broker.VHostInfo{Name: vh}); err != nil {
		t.Fatal(err)
	}
	if err := b.Broker.SetPermissions("guest", vh, ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	b.Restart()
	if got := b.Broker.Policies(vh); len(got) != 0 {
		t.Fatalf("policies of the recreated vhost: %+v", got)
	}
	conn := pmDial(t, b, "guest", "guest", vh)
	for _, q := range []string{"dq", "dq2"} {
		_, err := rqPassiveQueue(conn, q)
		rqWantErr(t, err, 404, "NOT_FOUND - no queue '"+q+"' in vhost '/doomed'")
	}
	for _, x := range []string{"dx", "dx2"} {
		if rqExchangeExists(t, conn, x) {
			t.Fatalf("exchange %s came back", x)
		}
	}
	_, err := pmTryDial(b, "u", "pw", vh)
	rqWantErr(t, err, 530, "NOT_ALLOWED - access to vhost '/doomed' refused for user 'u'")
}

// Users (with passwords and tags), permissions and vhosts (with metadata)
// survive a restart.
func TestAuthDurableAcrossRestart(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	if err := b.Broker.PutVHost(broker.VHostInfo{Name: "/m", Description: "meta", DefaultQueueType: "quorum", Tags: []string{"t1", "t2"}}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []broker.UserSpec{
		{Name: "alice", Password: "s1", Tags: []string{"monitoring", "policymaker"}},
		{Name: "bob", PasswordHash: "AQIDBJR91gt1SAWTmvD+VzA7MFU=", HashingAlgorithm: broker.HashMD5},
		{Name: "carol", Password: "s3", HashingAlgorithm: broker.HashSHA512},
		{Name: "dave"},
	} {
		if err := b.Broker.PutUser(u); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []broker.PermissionInfo{
		{User: "alice", VHost: "/m", Configure: "^a", Write: "^b|^c", Read: ""},
		{User: "bob", VHost: "/m", Configure: ".*", Write: ".*", Read: ".*"},
		{User: "carol", VHost: "/", Configure: "", Write: "", Read: ""},
	} {
		if err := b.Broker.SetPermissions(p.User, p.VHost, p.Configure, p.Write, p.Read); err != nil {
			t.Fatal(err)
		}
	}
	users, perms, vhosts := b.Broker.Users(), b.Broker.Permissions(), b.Broker.VHosts()
	if len(users) != 5 || len(perms) != 4 || len(vhosts) != 2 {
		t.Fatalf("before restart: %d users, %d permissions, %d vhosts", len(users), len(perms), len(vhosts))
	}

	b.Restart()
	if got := b.Broker.Users(); !slices.EqualFunc(got, users, usEqual) {
		t.Fatalf("users after restart:\n%+v\nwant\n%+v", got, users)
	}
	if got := b.Broker.Permissions(); !slices.Equal(got, perms) {
		t.Fatalf("permissions after restart:\n%+v\nwant\n%+v", got, perms)
	}
	if got := b.Broker.VHosts(); !vhEqual(got, vhosts) {
		t.Fatalf("vhosts after restart:\n%+v\nwant\n%+v", got, vhosts)
	}
	// Passwords log in; permissions are enforced as before.
	conn := pmDial(t, b, "alice", "s1", "/m")
	brokertest.NewSession(t, conn).Declare("aq", nil)
	rqFails(t, conn, 403, "ACCESS_REFUSED - configure access to queue 'bq' in vhost '/m' refused for user 'alice'", func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("bq", false, false, false, false, nil)
		return err
	})
	pmDial(t, b, "bob", "pw", "/m")
	pmDial(t, b, "carol", "s3", "/")
	if _, err := b.Broker.Login("dave", "", usNear); err == nil {
		t.Fatal("user without a password logs in after restart")
	}
}

// The bootstrap vhosts and users are created once, on a fresh store:
// deleted, they stay deleted across restarts (guest included).
func TestBootstrapOnce(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{
		VHosts: []string{"/", "/b"},
		Users:  []broker.UserSpec{{Name: "guest", Password: "guest"}, {Name: "boot", PasswordHash: "GP2IDdextvwuCU4roI2DO3sUgFtvUjCEbFTM46Joz8LK5meC", Tags: []string{"administrator"}}},
	}})
	want := []broker.PermissionInfo{
		{User: "boot", VHost: "/", Configure: ".*", Write: ".*", Read: ".*"},
		{User: "guest", VHost: "/", Configure: ".*", Write: ".*", Read: ".*"},
		{User: "boot", VHost: "/b", Configure: ".*", Write: ".*", Read: ".*"},
		{User: "guest", VHost: "/b", Configure: ".*", Write: ".*", Read: ".*"},
	}
	if got := b.Broker.Permissions(); !slices.Equal(got, want) {
		t.Fatalf("bootstrap permissions %+v, want %+v", got, want)
	}
	pmDial(t, b, "boot", "s3cret", "/b")
	guest := b.Dial(t)
	gclosed := guest.NotifyClose(make(chan *amqp091.Error, 1))
	if err := b.Broker.DeleteUser("guest"); err != nil {
		t.Fatal(err)
	}
	rqWantErr(t, <-gclosed, 320, "CONNECTION_FORCED - user 'guest' is deleted")
	if err := b.Broker.DeleteVHost("/b"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		b.Restart()
		if _, ok := b.Broker.User("guest"); ok {
			t.Fatal("deleted guest came back")
		}
		if _, err := b.Broker.Login("guest", "guest", usNear); err == nil {
			t.Fatal("deleted guest logs in")
		}
		if got := b.Broker.VHosts(); len(got) != 1 || got[0].Name != "/" {
			t.Fatalf("vhosts %+v, want / only", got)
		}
		pmDial(t, b, "boot", "s3cret", "/")
	}
}

// A store written before users were stored (vhosts and definitions, no
// users, no bootstrap mark) is bootstrapped once: the bootstrap users are
// created with permissions on the bootstrap vhosts, its other vhosts and
// their contents stay.
func TestBootstrapStoreFromBeforeUsers(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	if err := b.Broker.PutVHost(broker.VHostInfo{Name: "/old"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Broker.SetPermissions("guest", "/old", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	ch := brokertest.NewSession(t, pmDial(t, b, "guest", "guest", "/old"))
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch.Publish("", "q", amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("m")})
	if err := b.Broker.DeleteUser("guest"); err != nil {
		t.Fatal(err)
	}
	b.Stop()
	ops, err := broker.PreUsersLayoutForTest(b.Store)
	if err != nil {
		t.Fatal(err)
	}
	var d broker.DefsForTest
	d.VHost("/") // without metadata, as written before
	ops = append(ops, d.Ops()...)
	errc := make(chan error, 1)
	b.Store.Apply(&store.Batch{Meta: ops}, func(err error) { errc <- err })
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	b.Restart()
	wantV := []broker.VHostInfo{{Name: "/"}, {Name: "/old"}}
	if got := b.Broker.VHosts(); !vhEqual(got, wantV) {
		t.Fatalf("vhosts %+v, want %+v", got, wantV)
	}
	wantP := []broker.PermissionInfo{{User: "guest", VHost: "/", Configure: ".*", Write: ".*", Read: ".*"}}
	if got := b.Broker.Permissions(); !slices.Equal(got, wantP) {
		t.Fatalf("permissions %+v, want %+v", got, wantP)
	}
	if err := b.Broker.SetPermissions("guest", "/old", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	if q, err := rqPassiveQueue(pmDial(t, b, "guest", "guest", "/old"), "q"); err != nil || q.Messages != 1 {
		t.Fatalf("queue of the old vhost: %+v, %v", q, err)
	}
	if err := b.Broker.DeleteUser("guest"); err != nil {
		t.Fatal(err)
	}
	b.Restart() // bootstrapped: guest stays deleted
	if _, ok := b.Broker.User("guest"); ok {
		t.Fatal("guest created again after the bootstrap")
	}
}

// A user, permission or vhost change the store fails is undone in memory:
// the caller gets the error and the broker shows what it had.
func TestAuthChangeUndoneOnStoreFailure(t *testing.T) {
	type state struct {
		users  []broker.UserInfo
		perms  []broker.PermissionInfo
		vhosts []broker.VHostInfo
	}
	snapshot := func(b *broker.Broker) state { return state{b.Users(), b.Permissions(), b.VHosts()} }
	for _, c := range []struct {
		name   string
		change func(b *broker.Broker) error
	}{
		{"PutUser new", func(b *broker.Broker) error { return b.PutUser(broker.UserSpec{Name: "new", Password: "pw"}) }},
		{"PutUser replace", func(b *broker.Broker) error { return b.PutUser(broker.UserSpec{Name: "u", Tags: []string{"x"}}) }},
		{"DeleteUser", func(b *broker.Broker) error { return b.DeleteUser("u") }},
		{"SetPermissions", func(b *broker.Broker) error { return b.SetPermissions("u", "/", "", "", "") }},
		{"ClearPermissions", func(b *broker.Broker) error { return b.ClearPermissions("u", "/") }},
		{"PutVHost new", func(b *broker.Broker) error { return b.PutVHost(broker.VHostInfo{Name: "/n"}) }},
		{"PutVHost update", func(b *broker.Broker) error { return b.PutVHost(broker.VHostInfo{Name: "/v", Description: "x"}) }},
		{"DeleteVHost", func(b *broker.Broker) error { return b.DeleteVHost("/v") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var gate *gateStore
			b := brokertest.Start(t, brokertest.Config{WrapStore: func(s store.Store) store.Store {
				gate = &gateStore{Store: s, held: make(chan func(error), 1)}
				return gate
			}})
			if err := b.Broker.PutUser(broker.UserSpec{Name: "u", Password: "pw"}); err != nil {
				t.Fatal(err)
			}
			if err := b.Broker.PutVHost(broker.VHostInfo{Name: "/v", Description: "v"}); err != nil {
				t.Fatal(err)
			}
			for _, vh := range []string{"/", "/v"} {
				if err := b.Broker.SetPermissions("u", vh, ".*", ".*", ".*"); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(b.Broker)
			gate.arm(func(batch *store.Batch) bool { return len(batch.Meta) > 0 })
			var wg sync.WaitGroup
			var err error
			wg.Add(1)
			go func() { defer wg.Done(); err = c.change(b.Broker) }()
			(<-gate.held)(errors.New("disk on fire"))
			wg.Wait()
			if err == nil || !strings.Contains(err.Error(), "disk on fire") {
				t.Fatalf("change: %v, want the store's error", err)
			}
			after := snapshot(b.Broker)
			if !slices.EqualFunc(after.users, before.users, usEqual) || !slices.Equal(after.perms, before.perms) || !vhEqual(after.vhosts, before.vhosts) {
				t.Fatalf("after a failed change:\n%+v\nwant\n%+v", after, before)
			}
		})
	}
}

// Recovery drops permissions whose vhost or user is gone (as after a crash
// between the writes of a deletion made by an older layout), with a
// warning, and deletes them from the store.
func TestRecoveryDropsDanglingPermissions(t *testing.T) {
	logs := brokertest.NewLog(slog.LevelWarn)
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Logger: slog.New(logs)}})
	var d broker.DefsForTest
	d.Permission("/gone", "guest", ".*", ".*", ".*")
	d.Permission("/", "ghost", ".*", "", "")
	errc := make(chan error, 1)
	b.Store.Apply(&store.Batch{Meta: d.Ops()}, func(err error) { errc <- err })
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	logs.Take()
	b.Restart()
	want := []string{ // in key order: by vhost
		`recovery: dropping permissions of unknown user vhost="/" user="ghost"`,
		`recovery: dropping permissions in unknown vhost vhost="/gone" user="guest"`,
	}
	if got := logs.Take(); !slices.Equal(got, want) {
		t.Fatalf("warnings %q, want %q", got, want)
	}
	wantP := []broker.PermissionInfo{{User: "guest", VHost: "/", Configure: ".*", Write: ".*", Read: ".*"}}
	if got := b.Broker.Permissions(); !slices.Equal(got, wantP) {
		t.Fatalf("permissions %+v, want %+v", got, wantP)
	}
	b.Restart()
	if w := logs.Take(); len(w) != 0 {
		t.Fatalf("second restart warned: %q", w)
	}
}
