// Tests of users: password hashes, tags, logins and their durability.

package broker_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/internal/loginlimit"
)

// Users: RabbitMQ's password hashes, validation, login rules, deletion.
// Helpers carry the us prefix.

var (
	usFar  = &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 40000}
	usNear = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
)

// usLogsIn asserts that user logs in to "/" over AMQP with password and no
// other.
func usLogsIn(t *testing.T, b *brokertest.Instance, user, password string) {
	t.Helper()
	c, err := pmTryDial(b, user, password, "/")
	if err != nil {
		t.Fatalf("%s cannot log in with %q: %v", user, password, err)
	}
	c.Close()
	if _, err := b.Broker.Login(user, password+"x", usNear); err == nil {
		t.Fatalf("%s logs in with a wrong password", user)
	}
}

// Hashes RabbitMQ 3.10.8 made or accepted: each logs in with its password
// (the md5 and sha512 ones, and the sha256 one of "pw", were made with the
// salt 01020304 and checked by logging in to RabbitMQ with them; the
// "s3cret" one is RabbitMQ's own, from GET /api/users after setting the
// password; guest's is in config/brokerd.example.toml).
func TestUserRabbitMQHashes(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for i, c := range []struct{ alg, hash, password string }{
		{broker.HashMD5, "AQIDBJR91gt1SAWTmvD+VzA7MFU=", "pw"},
		{broker.HashSHA256, "AQIDBJsPGQAmNOBwcEzrqoDBa4HefPXET3JTmdZKm3Tj4CzZ", "pw"},
		{broker.HashSHA512, "AQIDBFEKgg91QUjXOoEuIijrYjDJqmh1G3gQJEpEZS2FiDEOS23JGoN2eht5cR6qAC4KAE7kqph8wGA/9reOn6y+bcw=", "pw"},
		{broker.HashSHA256, "GP2IDdextvwuCU4roI2DO3sUgFtvUjCEbFTM46Joz8LK5meC", "s3cret"},
		{"", "kI1KsWtT+9nON3W1/o0imLIDVd6oA+fMrA2rpagBHSiDQ/O9", "guest"},
	} {
		name := "h" + string(rune('a'+i))
		if err := b.Broker.PutUser(broker.UserSpec{Name: name, PasswordHash: c.hash, HashingAlgorithm: c.alg}); err != nil {
			t.Fatal(err)
		}
		if err := b.Broker.SetPermissions(name, "/", ".*", ".*", ".*"); err != nil {
			t.Fatal(err)
		}
		usLogsIn(t, b, name, c.password)
		u, _ := b.Broker.User(name)
		wantAlg := c.alg
		if wantAlg == "" {
			wantAlg = broker.HashSHA256
		}
		if u.PasswordHash != c.hash || u.HashingAlgorithm != wantAlg {
			t.Errorf("%s shows hash %q (%s), want %q (%s)", name, u.PasswordHash, u.HashingAlgorithm, c.hash, wantAlg)
		}
	}
}

// A password set in clear is hashed with the algorithm asked for (salt,
// then the digest), and the hash imported elsewhere logs in: the round
// trip of an export and import.
func TestUserHashRoundTrip(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for alg, digest := range map[string]int{"": 32, broker.HashSHA256: 32, broker.HashSHA512: 64, broker.HashMD5: 16} {
		if err := b.Broker.PutUser(broker.UserSpec{Name: "src", Password: "pa ss", HashingAlgorithm: alg}); err != nil {
			t.Fatal(err)
		}
		src, _ := b.Broker.User("src")
		raw, err := base64.StdEncoding.DecodeString(src.PasswordHash)
		if err != nil || len(raw) != 4+digest {
			t.Fatalf("%q: hash %q decodes to %d bytes (%v), want 4+%d", alg, src.PasswordHash, len(raw), err, digest)
		}
		if err := b.Broker.PutUser(broker.UserSpec{Name: "dst", PasswordHash: src.PasswordHash, HashingAlgorithm: src.HashingAlgorithm}); err != nil {
			t.Fatal(err)
		}
		for _, u := range []string{"src", "dst"} {
			if _, err := b.Broker.Login(u, "pa ss", usNear); err != nil {
				t.Errorf("%q: %s: %v", alg, u, err)
			}
			if _, err := b.Broker.Login(u, "pa s", usNear); err == nil {
				t.Errorf("%q: %s logs in with a wrong password", alg, u)
			}
		}
	}
	// Two hashes of one password differ: the salt is random.
	if err := b.Broker.PutUser(broker.UserSpec{Name: "dst", Password: "pa ss"}); err != nil {
		t.Fatal(err)
	}
	src, _ := b.Broker.User("src")
	dst, _ := b.Broker.User("dst")
	if src.PasswordHash == dst.PasswordHash {
		t.Fatalf("two hashes of one password are equal: %q", src.PasswordHash)
	}
}

// Invalid users are refused with an *InvalidError, in RabbitMQ's words
// where it has them, and change nothing.
func TestPutUserInvalid(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	if err := b.Broker.PutUser(broker.UserSpec{Name: "u", Password: "pw", Tags: []string{"management"}}); err != nil {
		t.Fatal(err)
	}
	before := b.Broker.Users()
	for _, c := range []struct {
		spec broker.UserSpec
		want string
	}{
		{broker.UserSpec{Password: "pw"}, "user name must not be empty"},
		{broker.UserSpec{Name: "u", Password: "pw", PasswordHash: "kI1KsWtT+9nON3W1/o0imLIDVd6oA+fMrA2rpagBHSiDQ/O9"}, "both_password_and_password_hash_are_provided"},
		{broker.UserSpec{Name: "u", PasswordHash: "!!notbase64"}, "not_base64: password_hash '!!notbase64' of user 'u' is not base64"},
		{broker.UserSpec{Name: "u", Password: "pw", HashingAlgorithm: "rabbit_password_hashing_foo"}, "unknown password hashing algorithm 'rabbit_password_hashing_foo': want one of rabbit_password_hashing_sha256, rabbit_password_hashing_sha512, rabbit_password_hashing_md5"},
	} {
		err := b.Broker.PutUser(c.spec)
		var inv *broker.InvalidError
		if !errors.As(err, &inv) || inv.Msg != c.want {
			t.Errorf("PutUser(%+v) = %v, want InvalidError %q", c.spec, err, c.want)
		}
	}
	if after := b.Broker.Users(); !slices.EqualFunc(before, after, usEqual) {
		t.Fatalf("refused PutUser changed the users: %+v, was %+v", after, before)
	}
	if _, err := b.Broker.Login("u", "pw", usNear); err != nil {
		t.Fatal(err)
	}
}

func usEqual(a, b broker.UserInfo) bool {
	return a.Name == b.Name && a.PasswordHash == b.PasswordHash && a.HashingAlgorithm == b.HashingAlgorithm && slices.Equal(a.Tags, b.Tags)
}

// A user without a password exists (RabbitMQ allows it, for other
// authentication backends) but cannot log in with any password; replacing
// a user keeps its permissions.
func TestUserWithoutPassword(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	if err := b.Broker.PutUser(broker.UserSpec{Name: "np", Password: "pw", Tags: []string{"a", "", "b", "a"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Broker.SetPermissions("np", "/", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	usLogsIn(t, b, "np", "pw")
	if err := b.Broker.PutUser(broker.UserSpec{Name: "np"}); err != nil {
		t.Fatal(err)
	}
	u, ok := b.Broker.User("np")
	if !ok || u.PasswordHash != "" || u.HashingAlgorithm != broker.HashSHA256 || len(u.Tags) != 0 {
		t.Fatalf("user without password: %+v, %v", u, ok)
	}
	for _, pw := range []string{"pw", ""} {
		if _, err := b.Broker.Login("np", pw, usNear); err == nil {
			t.Fatalf("user without a password logs in with %q", pw)
		}
	}
	if err := b.Broker.Authenticate("np", "pw", usNear); err == nil || err.Error() != "user 'np' - invalid credentials" {
		t.Fatalf("AMQP login of a user without a password: %v, want invalid credentials", err)
	}
	if err := b.Broker.PutUser(broker.UserSpec{Name: "np", Password: "new", Tags: []string{"a", "", "b", "a"}}); err != nil {
		t.Fatal(err)
	}
	if u, _ := b.Broker.User("np"); !slices.Equal(u.Tags, []string{"a", "b"}) {
		t.Fatalf("tags %q, want [a b] (empty and repeated tags dropped)", u.Tags)
	}
	usLogsIn(t, b, "np", "new") // the permissions were kept
}

// Loopback-only is a rule by name (RabbitMQ's loopback_users): it covers a
// user created through the API after start, and a password check comes
// first.
func TestLoopbackUsersByName(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{LoopbackUsers: []string{"guest", "later"}}})
	if err := b.Broker.PutUser(broker.UserSpec{Name: "later", Password: "pw"}); err != nil {
		t.Fatal(err)
	}
	for _, u := range [][2]string{{"guest", "guest"}, {"later", "pw"}} {
		_, err := b.Broker.Login(u[0], u[1], usFar)
		if err == nil || err.Error() != "user '"+u[0]+"' can only connect via localhost" {
			t.Errorf("%s from 10.0.0.1: %v, want can only connect via localhost", u[0], err)
		}
		if _, err := b.Broker.Login(u[0], u[1]+"x", usFar); err == nil || err.Error() != "user '"+u[0]+"' - invalid credentials" {
			t.Errorf("%s with a wrong password from 10.0.0.1: %v, want invalid credentials", u[0], err)
		}
		if _, err := b.Broker.Login(u[0], u[1], nil); err == nil {
			t.Errorf("%s from an unknown address logged in", u[0])
		}
		if info, err := b.Broker.Login(u[0], u[1], usNear); err != nil || info.Name != u[0] {
			t.Errorf("%s from loopback: %+v, %v", u[0], info, err)
		}
	}
	if _, err := b.Broker.Login("nobody", "x", usNear); err == nil || err.Error() != "user 'nobody' - invalid credentials" {
		t.Errorf("unknown user: %v", err)
	}
	// Without the option, guest only.
	b2 := brokertest.Start(t, brokertest.Config{})
	if err := b2.Broker.PutUser(broker.UserSpec{Name: "later", Password: "pw"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Broker.Login("later", "pw", usFar); err != nil {
		t.Errorf("later from 10.0.0.1 with default loopback users: %v", err)
	}
	if _, err := b2.Broker.Login("guest", "guest", usFar); err == nil {
		t.Error("guest from 10.0.0.1 logged in with default loopback users")
	}
}

// Deleting a user closes its connections with 320 CONNECTION_FORCED and
// RabbitMQ's text, takes its permissions, and refuses its logins; other
// users' connections stay.
func TestDeleteUser(t *testing.T) {
	b := rqStartUsers(t, map[string][3]string{"u": {".*", ".*", ".*"}, "v": {".*", ".*", ".*"}})
	uc := rqDialAs(t, b, "u")
	vc := rqDialAs(t, b, "v")
	uClosed := uc.NotifyClose(make(chan *amqp091.Error, 1))
	if err := b.Broker.DeleteUser("u"); err != nil {
		t.Fatal(err)
	}
	rqWantErr(t, <-uClosed, 320, "CONNECTION_FORCED - user 'u' is deleted")
	if _, ok := b.Broker.User("u"); ok {
		t.Fatal("deleted user still listed")
	}
	for _, p := range b.Broker.Permissions() {
		if p.User == "u" {
			t.Fatalf("deleted user's permissions remain: %+v", p)
		}
	}
	if _, err := pmTryDial(b, "u", "pw", "/"); err == nil {
		t.Fatal("deleted user logged in")
	}
	if err := b.Broker.DeleteUser("u"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	brokertest.NewSession(t, vc).Declare("still-open", nil)
	// Recreated, the user has no permissions until given some.
	if err := b.Broker.PutUser(broker.UserSpec{Name: "u", Password: "pw"}); err != nil {
		t.Fatal(err)
	}
	_, err := pmTryDial(b, "u", "pw", "/")
	rqWantErr(t, err, 530, "NOT_ALLOWED - access to vhost '/' refused for user 'u'")
}

// A user tagged impersonator may publish with another user's user_id
// (rabbit_channel check_user_id_header); a tag given to a connected user
// applies at once.
func TestUserImpersonator(t *testing.T) {
	b := rqStartUsers(t, map[string][3]string{"u": {".*", ".*", ".*"}})
	conn := rqDialAs(t, b, "u")
	brokertest.NewSession(t, conn).Declare("q", nil)
	msg := amqp091.Publishing{UserId: "someone", Body: []byte("m")}
	ch := brokertest.NewSession(t, conn)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := ch.Channel.Publish("", "q", false, false, msg); err != nil {
		t.Fatal(err)
	}
	rqWantErr(t, <-closed, 406, "PRECONDITION_FAILED - user_id property set to 'someone' but authenticated user was 'u'")
	if err := b.Broker.PutUser(broker.UserSpec{Name: "u", Password: "pw", Tags: []string{"impersonator"}}); err != nil {
		t.Fatal(err)
	}
	ch = brokertest.NewSession(t, conn)
	ch.Publish("", "q", msg)
	d, ok, err := ch.Channel.Get("q", true)
	if err != nil || !ok || d.UserId != "someone" {
		t.Fatalf("get: %+v %v %v", d, ok, err)
	}
}

func TestUsersListed(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for _, n := range []string{"zed", "amy"} {
		if err := b.Broker.PutUser(broker.UserSpec{Name: n, Tags: []string{"monitoring"}}); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for _, u := range b.Broker.Users() {
		names = append(names, u.Name)
	}
	if !slices.Equal(names, []string{"amy", "guest", "zed"}) {
		t.Fatalf("Users() names %q, want [amy guest zed]", names)
	}
	if g, ok := b.Broker.User("guest"); !ok || !slices.Equal(g.Tags, []string{"administrator"}) || g.HashingAlgorithm != broker.HashSHA256 {
		t.Fatalf("guest: %+v %v", g, ok)
	}
	if _, ok := b.Broker.User("nobody"); ok {
		t.Fatal("User(nobody) found")
	}
}

// usClock is a clock the test moves.
type usClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *usClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *usClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// A source gets a budget of failed logins however many connections it
// opens: 32 connections at once, trying 8 passwords each with the right
// one among them, have only the budget's guesses checked (the clock does
// not move), so the right password, past the budget, is refused like a
// wrong one. Another source is not affected; once the budget refills, the
// right password gets in.
func TestLoginGuessesBoundedPerSource(t *testing.T) {
	t.Parallel()
	clk := &usClock{t: time.Unix(1e9, 0)}
	const burst = 5
	b := brokertest.Start(t, brokertest.Config{
		Server: amqp.ServerConfig{LoginFailureDelay: -1},
		Broker: broker.Options{LoginLimit: loginlimit.New(loginlimit.Options{Burst: burst, Interval: time.Second, Now: clk.now})},
	})
	if err := b.Broker.PutUser(broker.UserSpec{Name: "victim", Password: "right"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Broker.SetPermissions("victim", "/", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	const conns, guesses = 32, 8
	var refused, accepted atomic.Int64
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range guesses {
				pw := fmt.Sprintf("guess-%d-%d", i, g)
				if i == conns-1 && g == guesses-1 {
					pw = "right" // the last guess of all, long past the budget
				}
				c, err := pmTryDial(b, "victim", pw, "/")
				if err == nil {
					accepted.Add(1)
					c.Close()
					continue
				}
				if e := (*amqp091.Error)(nil); errors.As(err, &e) && e.Code == amqp091.AccessRefused {
					refused.Add(1)
					continue
				}
				t.Errorf("guess %q: %v, want 403 ACCESS_REFUSED", pw, err)
			}
		}()
	}
	wg.Wait()
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the right password got in among %d guesses from one source with a budget of %d", conns*guesses, burst)
	}
	if n := refused.Load(); n != conns*guesses {
		t.Fatalf("%d guesses refused, want all %d", n, conns*guesses)
	}
	// The budget is the source's, not the user's: the same password from
	// another loopback address is checked.
	if _, err := b.Broker.Login("victim", "right", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 1}); err != nil {
		t.Fatalf("another source: %v", err)
	}
	if _, err := pmTryDial(b, "victim", "right", "/"); err == nil {
		t.Fatal("the right password got in over the budget")
	}
	clk.add(time.Second)
	c, err := pmTryDial(b, "victim", "right", "/")
	if err != nil {
		t.Fatalf("the right password, one interval later: %v", err)
	}
	c.Close()
}
