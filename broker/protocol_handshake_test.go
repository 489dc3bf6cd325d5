// Tests of the connection handshake: header, login, timeouts and their logging.

package broker_test

// Tests of the connection handshake: protocol header, server properties,
// handshake timeout, login (PLAIN, AMQPLAIN, bad passwords and their
// delay, guest from loopback only), failures logged as counts, and the
// virtual host.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"strconv"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func TestHandshakeServerProperties(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c := b.Dial(t)
	if c.Major != 0 || c.Minor != 9 {
		t.Errorf("version %d-%d, want 0-9", c.Major, c.Minor)
	}
	if p := c.Properties["product"]; p != "brokerd" {
		t.Errorf("product = %#v, want \"brokerd\"", p)
	}
	caps, ok := c.Properties["capabilities"].(amqp091.Table)
	if !ok {
		t.Fatalf("capabilities = %#v, want a table", c.Properties["capabilities"])
	}
	for _, name := range []string{
		"publisher_confirms", "exchange_exchange_bindings", "basic.nack",
		"consumer_cancel_notify", "connection.blocked", "consumer_priorities",
		"authentication_failure_close", "per_consumer_qos", "direct_reply_to",
	} {
		if v, _ := caps[name].(bool); !v {
			t.Errorf("capability %s = %#v, want true", name, caps[name])
		}
	}

	r := dialRaw(t, b.Addr)
	start := r.start()
	if start.Mechanisms != "PLAIN AMQPLAIN" || start.Locales != "en_US" {
		t.Errorf("mechanisms %q locales %q, want \"PLAIN AMQPLAIN\" and \"en_US\"", start.Mechanisms, start.Locales)
	}
}

func TestProtocolHeaderMismatch(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for _, hdr := range []string{"AMQP\x00\x00\x09\x00", "AMQP\x01\x01\x00\x0a", "HTTP/1.1"} {
		t.Run(fmt.Sprintf("%q", hdr), func(t *testing.T) {
			r := dialRaw(t, b.Addr)
			r.mustWrite([]byte(hdr))
			got, _ := r.drain(prWait)
			if string(got) != "AMQP\x00\x00\x09\x01" {
				t.Fatalf("server answered %q, want \"AMQP\\x00\\x00\\x09\\x01\" then close", got)
			}
		})
	}
	prNewBystander(t, b).check(t)
}

func TestHandshakeTimeout(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{HandshakeTimeout: 300 * time.Millisecond}})
	r := dialRaw(t, b.Addr)
	r.start() // then say nothing
	took := r.expectHangup(prWait)
	if took < 200*time.Millisecond {
		t.Fatalf("dropped after %v, before the 300ms handshake timeout", took)
	}
}

func TestLoginPLAIN(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, err := amqp091.DialConfig(b.URL, amqp091.Config{SASL: []amqp091.Authentication{&amqp091.PlainAuth{Username: "guest", Password: "guest"}}})
	if err != nil {
		t.Fatalf("PLAIN login: %v", err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
}

func TestLoginAMQPLAIN(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	cfg := amqp091.Config{SASL: []amqp091.Authentication{&amqp091.AMQPlainAuth{Username: "guest", Password: "guest"}}}
	c, err := amqp091.DialConfig(b.URL, cfg)
	if err != nil {
		t.Fatalf("AMQPLAIN login: %v", err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}

	cfg = amqp091.Config{SASL: []amqp091.Authentication{&amqp091.AMQPlainAuth{Username: "guest", Password: "wrong"}}}
	if c, err := amqp091.DialConfig(b.URL, cfg); err == nil {
		c.Close()
		t.Fatal("AMQPLAIN login with a wrong password succeeded")
	} else if e := prAmqpErr(t, err); e.Code != amqp091.AccessRefused {
		t.Fatalf("AMQPLAIN wrong password: %v, want 403", err)
	}
}

func TestLoginBadPassword(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	by := prNewBystander(t, b)
	u := strings.Replace(b.URL, "guest:guest", "guest:wrong", 1)
	c, err := amqp091.Dial(u)
	if err == nil {
		c.Close()
		t.Fatal("login with a wrong password succeeded")
	}
	if e := prAmqpErr(t, err); e.Code != amqp091.AccessRefused {
		t.Fatalf("wrong password: %v, want 403 ACCESS_REFUSED", err)
	}

	// A client announcing authentication_failure_close is told why.
	t.Run("authentication_failure_close", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.start()
		r.startOk(rawOpts{User: "guest", Password: "wrong", ClientProps: amqp.Table{
			{Key: "capabilities", Value: amqp.Table{{Key: "authentication_failure_close", Value: true}}},
		}})
		cl := r.expectConnectionClose(amqp.AccessRefused)
		if want := "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN"; !strings.HasPrefix(cl.ReplyText, want) {
			t.Fatalf("reply text %q, want prefix %q", cl.ReplyText, want)
		}
	})
	// Without it the server just hangs up, as RabbitMQ does.
	t.Run("plain hangup", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.start()
		r.startOk(rawOpts{User: "nobody", Password: "x"})
		if got, _ := r.drain(prWait); len(got) != 0 {
			t.Fatalf("server sent %q after a refused login, want nothing", got)
		}
	})
	by.check(t)
}

// A refused login is answered LoginFailureDelay after the start-ok, and an
// unknown user and a wrong password get the same answer; a good login is
// not delayed.
func TestLoginFailureDelayed(t *testing.T) {
	t.Parallel()
	const delay = 400 * time.Millisecond
	b := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{LoginFailureDelay: delay}})
	afc := amqp.Table{{Key: "capabilities", Value: amqp.Table{{Key: "authentication_failure_close", Value: true}}}}
	refuse := func(user, password string) (*amqp.ConnectionClose, time.Duration) {
		t.Helper()
		r := dialRaw(t, b.Addr)
		r.start()
		start := time.Now()
		r.startOk(rawOpts{User: user, Password: password, ClientProps: afc})
		cl := rawExpect[*amqp.ConnectionClose](r, 0)
		took := time.Since(start)
		r.send(0, &amqp.ConnectionCloseOk{})
		r.expectHangup(prWait)
		return cl, took
	}
	unknown, tookUnknown := refuse("nobody", "guest")
	wrong, tookWrong := refuse("guest", "wrong")
	for _, took := range []time.Duration{tookUnknown, tookWrong} {
		if took < delay {
			t.Errorf("login refused after %v, before the %v delay", took, delay)
		}
	}
	if *unknown != *wrong {
		t.Errorf("unknown user refused with %+v, wrong password with %+v: a client can tell them apart", unknown, wrong)
	}
	if unknown.ReplyCode != amqp.AccessRefused {
		t.Errorf("refused with %d %q, want 403", unknown.ReplyCode, unknown.ReplyText)
	}

	// Without authentication_failure_close the server hangs up, as late.
	// The delay counts from when the server read start-ok, so the time is
	// taken before sending it: taken after, the server may have read it
	// already.
	r := dialRaw(t, b.Addr)
	r.start()
	start := time.Now()
	r.startOk(rawOpts{User: "guest", Password: "wrong"})
	r.expectHangup(prWait)
	if took := time.Since(start); took < delay {
		t.Errorf("hung up %v after a refused login, before the %v delay", took, delay)
	}

	// A good login goes straight on to tune.
	r = dialRaw(t, b.Addr)
	r.start()
	start = time.Now()
	r.startOk(rawOpts{})
	rawExpect[*amqp.ConnectionTune](r, 0)
	if took := time.Since(start); took >= delay {
		t.Errorf("a good login was answered after %v, as late as a refusal", took)
	}
}

// prEvents returns how many lines log has with message msg and how many
// events they stand for: an aggregated line carries its count, any other
// is one.
func prEvents(log *brokertest.Log, msg string) (lines, events int) {
	for _, ln := range log.Lines() {
		if ln.Msg != msg {
			continue
		}
		lines++
		n := 1
		if c, ok := ln.Get("count"); ok {
			n, _ = strconv.Atoi(c)
		}
		events += n
	}
	return lines, events
}

// Failed logins and handshakes that time out, which any peer can cause
// as often as it likes, are logged as counts: at most about one line a
// second each, and every one of them counted.
func TestHandshakeFailuresLoggedAsCounts(t *testing.T) {
	t.Parallel()
	logs := brokertest.NewLog(slog.LevelDebug)
	start := time.Now()
	b := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{
		Logger:            slog.New(logs),
		LoginFailureDelay: 5 * time.Millisecond,
		HandshakeTimeout:  200 * time.Millisecond,
	}})
	const logins, idle = 40, 20
	var idlers []*rawConn
	for range idle {
		r := dialRaw(t, b.Addr)
		r.mustWrite(amqp.ProtocolHeader[:])
		idlers = append(idlers, r)
	}
	errs := make(chan error, logins)
	for i := range logins {
		go func() {
			u := strings.Replace(b.URL, "guest:guest", "guest:wrong", 1)
			if i%2 == 0 {
				u = strings.Replace(b.URL, "guest:guest", fmt.Sprintf("nobody%d:x", i), 1)
			}
			c, err := amqp091.Dial(u)
			if err == nil {
				c.Close()
				err = errors.New("login succeeded")
			} else if e := (*amqp091.Error)(nil); errors.As(err, &e) && e.Code == amqp091.AccessRefused {
				err = nil
			}
			errs <- err
		}()
	}
	for range logins {
		if err := <-errs; err != nil {
			t.Fatalf("bad login: %v, want 403 ACCESS_REFUSED", err)
		}
	}
	for _, r := range idlers {
		r.expectHangup(prWait)
	}
	b.Stop() // logs the counts still pending
	bound := 2 + int(time.Since(start)/time.Second)
	for _, c := range []struct {
		msg  string
		want int
	}{{"login refused", logins}, {"handshake failed", idle}} {
		lines, events := prEvents(logs, c.msg)
		if events != c.want {
			t.Errorf("%q lines count %d events, want %d", c.msg, events, c.want)
		}
		if lines > bound {
			t.Errorf("%d %q lines for %d events in %v; want at most %d", lines, c.msg, c.want, time.Since(start), bound)
		}
		t.Logf("%d events, %d %q lines", c.want, lines, c.msg)
	}
	for _, msg := range []string{"connection ended", "connection closed with error"} {
		if lines, _ := prEvents(logs, msg); lines > 0 {
			t.Errorf("%d %q lines, want none: each failed handshake is in the counts", lines, msg)
		}
	}
}

func TestGuestLoopbackOnly(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Users: []broker.UserSpec{
		{Name: "guest", Password: "guest"}, // loopback only by default
		{Name: "remote", Password: "secret"},
	}}})
	far := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 40000}
	near := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	err := b.Broker.Authenticate("guest", "guest", far)
	if err == nil || !strings.Contains(err.Error(), "can only connect via localhost") {
		t.Errorf("guest from 10.0.0.1: %v, want refusal \"can only connect via localhost\"", err)
	}
	if err := b.Broker.Authenticate("guest", "guest", near); err != nil {
		t.Errorf("guest from loopback: %v", err)
	}
	if err := b.Broker.Authenticate("remote", "secret", far); err != nil {
		t.Errorf("remote user from 10.0.0.1: %v", err)
	}
	if err := b.Broker.Authenticate("remote", "wrong", far); err == nil {
		t.Error("remote user with a wrong password accepted")
	}
	// The non-loopback user logs in for real too.
	c, err := amqp091.Dial(strings.Replace(b.URL, "guest:guest", "remote:secret", 1))
	if err != nil {
		t.Fatalf("remote user dial: %v", err)
	}
	c.Close()
}

func TestUnknownVHost(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, err := amqp091.Dial(b.URL + "nosuch")
	if err == nil {
		c.Close()
		t.Fatal("dial to an unknown vhost succeeded")
	}
	e := prAmqpErr(t, err)
	if !e.Server {
		t.Fatalf("error %v was not sent by the server", e)
	}
	prWantCode(t, e, amqp091.NotAllowed, "vhost nosuch not found")
}
