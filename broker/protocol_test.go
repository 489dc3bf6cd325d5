package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/internal/brokertest"
)

// prWait bounds every wait for an event a test expects.
const prWait = 5 * time.Second

// prBystander is a connection opened before a test misbehaves on another
// one; check proves it still publishes and consumes afterwards.
type prBystander struct {
	conn  *amqp091.Connection
	ch    *amqp091.Channel
	queue string
	msgs  <-chan amqp091.Delivery
	n     atomic.Int64
}

func prNewBystander(t *testing.T, b *brokertest.Instance) *prBystander {
	t.Helper()
	conn, ch := b.Channel(t)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatalf("bystander declare: %v", err)
	}
	msgs, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("bystander consume: %v", err)
	}
	return &prBystander{conn: conn, ch: ch, queue: q.Name, msgs: msgs}
}

func (by *prBystander) check(t *testing.T) {
	t.Helper()
	if by.conn.IsClosed() {
		t.Fatal("bystander connection was closed")
	}
	body := fmt.Sprintf("ping %d", by.n.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), prWait)
	defer cancel()
	if err := by.ch.PublishWithContext(ctx, "", by.queue, false, false, amqp091.Publishing{Body: []byte(body)}); err != nil {
		t.Fatalf("bystander publish: %v", err)
	}
	select {
	case d, ok := <-by.msgs:
		if !ok {
			t.Fatal("bystander consumer closed")
		}
		if string(d.Body) != body {
			t.Fatalf("bystander got %q, want %q", d.Body, body)
		}
	case <-ctx.Done():
		t.Fatal("bystander got no delivery")
	}
}

// prAmqpErr returns err as an *amqp091.Error, failing the test otherwise.
func prAmqpErr(t *testing.T, err error) *amqp091.Error {
	t.Helper()
	var e *amqp091.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *amqp091.Error", err, err)
	}
	return e
}

// prAwaitClose waits for a NotifyClose channel to deliver an error.
func prAwaitClose(t *testing.T, c <-chan *amqp091.Error, what string) *amqp091.Error {
	t.Helper()
	select {
	case e := <-c:
		if e == nil {
			t.Fatalf("%s closed without an error", what)
		}
		return e
	case <-time.After(prWait):
		t.Fatalf("%s not closed within %v", what, prWait)
	}
	return nil
}

func prWantCode(t *testing.T, e *amqp091.Error, code int, text string) {
	t.Helper()
	if e.Code != code || !strings.Contains(e.Reason, text) {
		t.Fatalf("got %d %q, want %d containing %q", e.Code, e.Reason, code, text)
	}
}

// --- 1. Handshake ---

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
	r := dialRaw(t, b.Addr)
	r.start()
	r.startOk(rawOpts{User: "guest", Password: "wrong"})
	if took := r.expectHangup(prWait); took < delay {
		t.Errorf("hung up %v after a refused login, before the %v delay", took, delay)
	}

	// A good login goes straight on to tune.
	r = dialRaw(t, b.Addr)
	r.start()
	start := time.Now()
	r.startOk(rawOpts{})
	rawExpect[*amqp.ConnectionTune](r, 0)
	if took := time.Since(start); took >= delay {
		t.Errorf("a good login was answered after %v, as late as a refusal", took)
	}
}

// prLog records what the server logs.
type prLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *prLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *prLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *prLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *prLog) WithGroup(string) slog.Handler      { return h }

// events returns how many lines have message msg and how many events they
// stand for: an aggregated line carries its count, any other is one.
func (h *prLog) events(msg string) (lines, events int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Message != msg {
			continue
		}
		lines++
		n := 1
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "count" {
				n = int(a.Value.Int64())
			}
			return true
		})
		events += n
	}
	return lines, events
}

// Failed logins and handshakes that time out, which any peer can cause
// as often as it likes, are logged as counts: at most about one line a
// second each, and every one of them counted.
func TestHandshakeFailuresLoggedAsCounts(t *testing.T) {
	t.Parallel()
	logs := &prLog{}
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
		lines, events := logs.events(c.msg)
		if events != c.want {
			t.Errorf("%q lines count %d events, want %d", c.msg, events, c.want)
		}
		if lines > bound {
			t.Errorf("%d %q lines for %d events in %v; want at most %d", lines, c.msg, c.want, time.Since(start), bound)
		}
		t.Logf("%d events, %d %q lines", c.want, lines, c.msg)
	}
	for _, msg := range []string{"connection ended", "connection closed with error"} {
		if lines, _ := logs.events(msg); lines > 0 {
			t.Errorf("%d %q lines, want none: each failed handshake is in the counts", lines, msg)
		}
	}
}

func TestGuestLoopbackOnly(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Users: []broker.UserSpec{
		{Name: "guest", Password: "guest", LoopbackOnly: true},
		{Name: "remote", Password: "secret", LoopbackOnly: false},
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

// --- 2. Tune ---

func TestTuneFrameMax(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	body := make([]byte, 20000)
	for i := range body {
		body[i] = byte(i * 7)
	}

	t.Run("amqp091", func(t *testing.T) {
		c, err := amqp091.DialConfig(b.URL, amqp091.Config{FrameSize: 8192})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if c.Config.FrameSize != 8192 {
			t.Fatalf("negotiated frame size %d, want 8192", c.Config.FrameSize)
		}
		ch, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		q, err := ch.QueueDeclare("", false, true, true, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := ch.Consume(q.Name, "", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.PublishWithContext(context.Background(), "", q.Name, false, false, amqp091.Publishing{Body: body}); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-msgs:
			if !bytes.Equal(d.Body, body) {
				t.Fatalf("body of %d bytes differs from the %d published", len(d.Body), len(body))
			}
		case <-time.After(prWait):
			t.Fatal("no delivery")
		}
	})

	// The raw client sees how the server splits the body.
	t.Run("frames", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.handshake(rawOpts{TuneOk: func(tu amqp.ConnectionTune) amqp.ConnectionTuneOk {
			return amqp.ConnectionTuneOk{ChannelMax: tu.ChannelMax, FrameMax: 8192}
		}})
		r.openChannel(1)
		r.send(1, &amqp.QueueDeclare{Queue: "framemax", Exclusive: true})
		rawExpect[*amqp.QueueDeclareOk](r, 1)
		// Frames of exactly frame_max bytes are accepted.
		r.publish(1, "", "framemax", body, 8192)
		r.send(1, &amqp.BasicGet{Queue: "framemax", NoAck: true})
		rawExpect[*amqp.BasicGetOk](r, 1)
		h := r.frame()
		_, size, _, err := amqp.ParseContentHeader(h.Payload)
		if h.Type != amqp.FrameHeader || err != nil || size != uint64(len(body)) {
			t.Fatalf("content header: type %d size %d err %v", h.Type, size, err)
		}
		var got []byte
		frames := 0
		for len(got) < len(body) {
			f := r.frame()
			if f.Type != amqp.FrameBody {
				t.Fatalf("frame type %d inside the body", f.Type)
			}
			if len(f.Payload)+8 > 8192 {
				t.Fatalf("body frame of %d bytes exceeds frame_max 8192", len(f.Payload)+8)
			}
			got = append(got, f.Payload...)
			frames++
		}
		if frames != 3 || !bytes.Equal(got, body) {
			t.Fatalf("got %d body frames with %d bytes (equal %v), want 3 frames, the published body", frames, len(got), bytes.Equal(got, body))
		}
	})
}

func TestTuneRefused(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	by := prNewBystander(t, b)
	for _, tc := range []struct {
		name       string
		frameMax   uint32
		channelMax uint16
		text       string
	}{
		{"frame_max 1000", 1000, 0, "frame_max=1000 < 4096 min size"},
		{"frame_max 4095", 4095, 0, "frame_max=4095 < 4096 min size"},
		{"frame_max above server", 131073, 0, "frame_max=131073 > 131072 max size"},
		{"channel_max above server", 0, 2048, "channel_max=2048 > 2047 max size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, b.Addr)
			o := rawOpts{TuneOk: func(amqp.ConnectionTune) amqp.ConnectionTuneOk {
				return amqp.ConnectionTuneOk{ChannelMax: tc.channelMax, FrameMax: tc.frameMax}
			}}
			r.start()
			r.startOk(o)
			r.tune(o)
			r.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
			cl := r.expectConnectionClose(amqp.NotAllowed)
			if !strings.Contains(cl.ReplyText, tc.text) {
				t.Fatalf("reply text %q, want %q", cl.ReplyText, tc.text)
			}
		})
	}
	by.check(t)
}

func TestTuneChannelMax(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	t.Run("amqp091", func(t *testing.T) {
		c, err := amqp091.DialConfig(b.URL, amqp091.Config{ChannelMax: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if c.Config.ChannelMax != 2 {
			t.Fatalf("negotiated channel_max %d, want 2", c.Config.ChannelMax)
		}
		for i := 1; i <= 2; i++ {
			if _, err := c.Channel(); err != nil {
				t.Fatalf("channel %d: %v", i, err)
			}
		}
		if _, err := c.Channel(); err == nil {
			t.Fatal("third channel opened with channel_max 2")
		}
	})
	// The server enforces it too, for clients that do not.
	t.Run("server", func(t *testing.T) {
		by := prNewBystander(t, b)
		r := dialRaw(t, b.Addr)
		r.handshake(rawOpts{TuneOk: func(tu amqp.ConnectionTune) amqp.ConnectionTuneOk {
			return amqp.ConnectionTuneOk{ChannelMax: 2, FrameMax: tu.FrameMax}
		}})
		r.openChannel(1)
		r.openChannel(2)
		r.send(3, &amqp.ChannelOpen{})
		cl := r.expectConnectionClose(amqp.NotAllowed)
		if !strings.Contains(cl.ReplyText, "channel number 3 exceeds negotiated channel_max 2") {
			t.Fatalf("reply text %q", cl.ReplyText)
		}
		by.check(t)
	})
}

func TestMaxMessageSize(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{MaxMessageSize: 1000}})
	c, ch := b.Channel(t)
	q, err := ch.QueueDeclare("sized", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	ctx := context.Background()
	if err := ch.PublishWithContext(ctx, "", q.Name, false, false, amqp091.Publishing{Body: make([]byte, 1000)}); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(ctx, "", q.Name, false, false, amqp091.Publishing{Body: make([]byte, 1001)}); err != nil {
		t.Fatal(err)
	}
	e := prAwaitClose(t, closed, "channel")
	prWantCode(t, e, amqp091.PreconditionFailed, "PRECONDITION_FAILED - message size 1001 is larger than configured max size 1000")

	if c.IsClosed() {
		t.Fatal("connection closed by an oversized message")
	}
	ch2, err := c.Channel()
	if err != nil {
		t.Fatalf("new channel after the 406: %v", err)
	}
	d, ok, err := ch2.Get(q.Name, true)
	if err != nil || !ok || len(d.Body) != 1000 {
		t.Fatalf("get: ok=%v err=%v len=%d, want the 1000-byte message", ok, err, len(d.Body))
	}
	if _, ok, _ := ch2.Get(q.Name, true); ok {
		t.Fatal("the oversized message was enqueued")
	}
}

// --- 3. Heartbeats ---

func prHeartbeatBroker(t *testing.T) *brokertest.Instance {
	return brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{Heartbeat: time.Second}})
}

func prTuneHeartbeat(hb uint16) rawOpts {
	return rawOpts{TuneOk: func(tu amqp.ConnectionTune) amqp.ConnectionTuneOk {
		return amqp.ConnectionTuneOk{ChannelMax: tu.ChannelMax, FrameMax: tu.FrameMax, Heartbeat: hb}
	}}
}

func TestHeartbeatSilentClientDropped(t *testing.T) {
	t.Parallel()
	b := prHeartbeatBroker(t)
	// A bystander without heartbeats: amqp091 cannot turn off heartbeats
	// the server proposes, and 1 s ones are fragile on a loaded machine.
	quiet := dialRaw(t, b.Addr)
	quiet.handshake(prTuneHeartbeat(0))
	r := dialRaw(t, b.Addr)
	r.handshake(prTuneHeartbeat(1))
	// Two missed 1 s intervals: dropped after about 2 s.
	took := r.expectHangup(6 * time.Second)
	if took < 1500*time.Millisecond {
		t.Fatalf("silent client dropped after %v, before two heartbeat intervals", took)
	}
	t.Logf("silent client dropped after %v", took)
	// The client that turned heartbeats off in tune-ok, idle as long, was
	// neither sent heartbeats nor timed out.
	if f, err := quiet.next(300 * time.Millisecond); !rawIsTimeout(err) {
		t.Fatalf("client without heartbeats: frame type %d, err %v; want silence", f.Type, err)
	}
	quiet.openChannel(1)
}

func TestHeartbeatServerSends(t *testing.T) {
	t.Parallel()
	b := prHeartbeatBroker(t)
	r := dialRaw(t, b.Addr)
	r.start()
	r.startOk(rawOpts{})
	tune, _ := r.tune(prTuneHeartbeat(1))
	if tune.Heartbeat != 1 {
		t.Fatalf("server proposed heartbeat %d, want 1", tune.Heartbeat)
	}
	r.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
	rawExpect[*amqp.ConnectionOpenOk](r, 0)
	f, err := r.next(2 * time.Second)
	if err != nil {
		t.Fatalf("no frame within 2s of an idle connection: %v", err)
	}
	if f.Type != amqp.FrameHeartbeat || f.Channel != 0 || len(f.Payload) != 0 {
		t.Fatalf("got frame type %d channel %d payload %d bytes, want a heartbeat", f.Type, f.Channel, len(f.Payload))
	}
}

func TestHeartbeatClientKeepsAlive(t *testing.T) {
	t.Parallel()
	// Heartbeats every quarter interval, for more than two intervals.
	t.Run("raw", func(t *testing.T) {
		t.Parallel()
		b := prHeartbeatBroker(t)
		r := dialRaw(t, b.Addr)
		r.handshake(prTuneHeartbeat(1))
		received := 0
		for end := time.Now().Add(4500 * time.Millisecond); time.Now().Before(end); {
			r.mustWrite(amqp.AppendHeartbeat(nil))
			f, err := r.next(250 * time.Millisecond)
			switch {
			case err == nil && f.Type == amqp.FrameHeartbeat:
				received++
			case err == nil:
				t.Fatalf("unexpected frame type %d on an idle connection", f.Type)
			case !rawIsTimeout(err):
				t.Fatalf("heartbeating client dropped: %v", err)
			}
		}
		if received < 2 {
			t.Errorf("%d heartbeats from the server in 4.5s, want at least 2", received)
		}
		r.openChannel(1)
	})
	// amqp091 gives up on the server after 1.5 intervals of silence, so
	// it gets 2 s heartbeats here, and is left idle for more than two.
	t.Run("amqp091", func(t *testing.T) {
		t.Parallel()
		b := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{Heartbeat: 2 * time.Second}})
		c, err := amqp091.DialConfig(b.URL, amqp091.Config{Heartbeat: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if c.Config.Heartbeat != 2*time.Second {
			t.Fatalf("negotiated heartbeat %v, want 2s", c.Config.Heartbeat)
		}
		closed := c.NotifyClose(make(chan *amqp091.Error, 1))
		select {
		case e := <-closed:
			t.Fatalf("connection closed while heartbeating: %v", e)
		case <-time.After(5 * time.Second):
		}
		ch, err := c.Channel()
		if err != nil {
			t.Fatalf("channel after 5s idle: %v", err)
		}
		if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// --- 4. Close handshakes ---

func TestConnectionCloseHandshake(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	r.send(0, &amqp.ConnectionClose{ReplyCode: 200, ReplyText: "bye"})
	rawExpect[*amqp.ConnectionCloseOk](r, 0)
	r.expectHangup(prWait)

	c := b.Dial(t)
	if err := c.Close(); err != nil {
		t.Fatalf("amqp091 close: %v", err)
	}
}

// prFlood returns publishes to the default exchange adding up to more than
// the socket buffers of both ends can hold, so that a client writing them
// is still writing when the server closes.
func prFlood(ch uint16, key string) []byte {
	body := bytes.Repeat([]byte("x"), 100_000)
	var b []byte
	for len(b) < 16<<20 {
		b = amqp.AppendMethodFrame(b, ch, &amqp.BasicPublish{RoutingKey: key})
		b = amqp.AppendHeaderFrame(b, ch, 60, uint64(len(body)), rawEmptyProps)
		b = amqp.AppendBodyFrames(b, ch, body, 131072)
	}
	return b
}

// writeAsync writes b from another goroutine and reports the result.
func (r *rawConn) writeAsync(b []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		r.nc.SetWriteDeadline(time.Now().Add(4 * rawWait))
		_, err := r.nc.Write(b)
		done <- err
	}()
	return done
}

// expectEOF checks that the next read finds the end of the stream (the
// server's FIN), not a reset and not more data.
func (r *rawConn) expectEOF() {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(rawWait))
	n, err := r.fr.ReadFrame()
	if !errors.Is(err, io.EOF) {
		r.t.Fatalf("after the close: frame type %d, err %v; want end of stream", n.Type, err)
	}
}

// A client that sends connection.close ahead of more frames (amqplib
// sends close while publishes are still queued) reads close-ok and then a
// clean end of stream, not a reset, and everything it writes is taken in
// and discarded: nothing after the close is executed.
func TestConnectionCloseWhileClientWrites(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	if _, err := ch.QueueDeclare("after-close", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	wrote := r.writeAsync(prCat(amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionClose{ReplyCode: 200, ReplyText: "bye"}), prFlood(1, "after-close")))
	rawExpect[*amqp.ConnectionCloseOk](r, 0)
	r.expectEOF()
	if err := <-wrote; err != nil {
		t.Fatalf("writing after connection.close: %v (the server reset the connection)", err)
	}
	q, err := ch.QueueDeclarePassive("after-close", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 0 {
		t.Fatalf("%d publishes sent after connection.close were executed", q.Messages)
	}
}

// After a frame error the server cannot parse the rest of the stream, but
// a client still writing reads the connection.close and a clean end of
// stream, not a reset.
func TestServerCloseWhileClientWrites(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	wrote := r.writeAsync(prCat(prFrame(9, 1, bytes.Repeat([]byte{0xff}, 100)), prFlood(1, "nowhere")))
	cl := rawExpect[*amqp.ConnectionClose](r, 0)
	if cl.ReplyCode != amqp.FrameError {
		t.Fatalf("connection.close %d %q, want 501", cl.ReplyCode, cl.ReplyText)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("writing after the server's connection.close: %v (the server reset the connection)", err)
	}
	r.expectEOF()
}

// A client that never hangs up after close-ok is let go after CloseLinger:
// a shutdown waits for no more than that.
func TestCloseLingerBounded(t *testing.T) {
	const linger = 300 * time.Millisecond
	b := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{CloseLinger: linger}})
	r := dialRawOpen(t, b.Addr)
	r.send(0, &amqp.ConnectionClose{ReplyCode: 200})
	rawExpect[*amqp.ConnectionCloseOk](r, 0)
	closed := time.Now()
	r.expectEOF()
	// r keeps its socket open. The shutdown waits for the linger, which
	// ends on its own, well before the shutdown's own deadline.
	b.Stop()
	if took := time.Since(closed); took < linger {
		t.Fatalf("the server let go %v after close-ok, before the %v linger", took, linger)
	} else if took > prWait {
		t.Fatalf("the server let go %v after close-ok; the linger is %v", took, linger)
	}
}

func TestChannelCloseAndReopen(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	r.send(1, &amqp.ChannelClose{ReplyCode: 200, ReplyText: "done"})
	rawExpect[*amqp.ChannelCloseOk](r, 1)
	r.openChannel(1)
	r.send(1, &amqp.QueueDeclare{Queue: "reopened", Exclusive: true})
	if ok := rawExpect[*amqp.QueueDeclareOk](r, 1); ok.Queue != "reopened" {
		t.Fatalf("declare-ok for %q", ok.Queue)
	}
}

func TestChannelErrorIsolated(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch1 := b.Channel(t)
	ch2, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch2.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := ch2.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	closed := ch1.NotifyClose(make(chan *amqp091.Error, 1))
	_, err = ch1.QueueDeclarePassive("missing", false, false, false, false, nil)
	prWantCode(t, prAmqpErr(t, err), amqp091.NotFound, "NOT_FOUND - no queue 'missing' in vhost '/'")
	prWantCode(t, prAwaitClose(t, closed, "channel"), amqp091.NotFound, "no queue 'missing'")

	if c.IsClosed() {
		t.Fatal("a channel error closed the connection")
	}
	if err := ch2.PublishWithContext(context.Background(), "", q.Name, false, false, amqp091.Publishing{Body: []byte("still here")}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-msgs:
		if string(d.Body) != "still here" {
			t.Fatalf("body %q", d.Body)
		}
	case <-time.After(prWait):
		t.Fatal("the other channel got no delivery")
	}
	// A new channel works too.
	ch3, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch3.QueueDeclarePassive(q.Name, false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
}

func TestHardErrorClosesConnection(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	by := prNewBystander(t, b)
	c, ch := b.Channel(t)
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	err := ch.ExchangeDeclare("weird", "nosuch", false, false, false, false, nil)
	prWantCode(t, prAmqpErr(t, err), amqp091.CommandInvalid, "unknown exchange type 'nosuch'")
	e := prAwaitClose(t, closed, "connection")
	prWantCode(t, e, amqp091.CommandInvalid, "COMMAND_INVALID - unknown exchange type 'nosuch'")
	if !c.IsClosed() {
		t.Fatal("connection still open after a hard error")
	}
	by.check(t)

	// The close names the failing method.
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	r.send(1, &amqp.ExchangeDeclare{Exchange: "weird", Type: "nosuch"})
	cl := r.expectConnectionClose(amqp.CommandInvalid)
	if cl.FailingClassID != 40 || cl.FailingMethodID != 10 {
		t.Fatalf("close names method %d.%d, want exchange.declare 40.10", cl.FailingClassID, cl.FailingMethodID)
	}
	by.check(t)
}

func TestShutdownForcesClose(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, _ := b.Channel(t)
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)

	stopped := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		b.Stop()
		stopped <- time.Since(start)
	}()
	cl := r.expectConnectionClose(amqp.ConnectionForced)
	if !strings.HasPrefix(cl.ReplyText, "CONNECTION_FORCED - ") {
		t.Errorf("raw close text %q", cl.ReplyText)
	}
	e := prAwaitClose(t, closed, "connection")
	prWantCode(t, e, amqp091.ConnectionForced, "CONNECTION_FORCED - broker forced connection closure")
	select {
	case took := <-stopped:
		// Both clients answered close-ok, so the server did not wait for
		// its close timeout.
		if took > 2*time.Second {
			t.Errorf("shutdown took %v", took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("shutdown did not finish")
	}
}

// Shutdown does not wait out the close timeout for connections still in
// the handshake: one that answers close-ok is let go at once, one that has
// not even sent the protocol header (a TCP health check, a port scan) is
// hung up on without an AMQP frame it could not read.
func TestShutdownMidHandshake(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	mid := dialRaw(t, b.Addr)
	mid.start()
	mute := dialRaw(t, b.Addr)
	// The server must have accepted mute before Stop: a later connection
	// that gets through its handshake proves the accept loop got there.
	probe := dialRawOpen(t, b.Addr)
	probe.send(0, &amqp.ConnectionClose{ReplyCode: 200})
	rawExpect[*amqp.ConnectionCloseOk](probe, 0)
	// Hang up, as a client does after close-ok: the server would otherwise
	// keep the socket for its close linger.
	probe.expectEOF()
	probe.nc.Close()

	stopped := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		b.Stop()
		stopped <- time.Since(start)
	}()
	mid.expectConnectionClose(amqp.ConnectionForced)
	if got, _ := mute.drain(prWait); len(got) != 0 {
		t.Errorf("a client that never sent the protocol header got %q", got)
	}
	select {
	case took := <-stopped:
		if took > time.Second {
			t.Errorf("shutdown took %v, want well under the 3s close timeout", took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("shutdown did not finish")
	}
}

// After a soft error the server ignores the channel's frames, content
// included, until the client's close-ok; then the number can be reused.
func TestChannelClosingDiscardsFrames(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	r.send(1, &amqp.QueueDeclare{Queue: "discard", Exclusive: true})
	rawExpect[*amqp.QueueDeclareOk](r, 1)
	r.send(1, &amqp.QueueDeclare{Queue: "missing", Passive: true})
	// Sent before the client has seen the close: all discarded.
	r.publish(1, "", "discard", []byte("lost"), 131072)
	r.mustWrite(prFrame(amqp.FrameBody, 1, []byte("stray body")))
	cl := rawExpect[*amqp.ChannelClose](r, 1)
	if cl.ReplyCode != amqp.NotFound || cl.FailingClassID != 50 || cl.FailingMethodID != 10 {
		t.Fatalf("channel.close %d %q for %d.%d, want 404 for queue.declare", cl.ReplyCode, cl.ReplyText, cl.FailingClassID, cl.FailingMethodID)
	}
	r.send(1, &amqp.ChannelCloseOk{})
	r.openChannel(1)
	r.send(1, &amqp.QueueDeclare{Queue: "discard", Passive: true})
	if ok := rawExpect[*amqp.QueueDeclareOk](r, 1); ok.MessageCount != 0 {
		t.Fatalf("%d messages published on a closing channel were enqueued", ok.MessageCount)
	}
	// Both sides closing at once: each answers the other's close.
	r.send(1, &amqp.QueueDeclare{Queue: "missing", Passive: true})
	r.send(1, &amqp.ChannelClose{ReplyCode: 200})
	rawExpect[*amqp.ChannelClose](r, 1)
	r.send(1, &amqp.ChannelCloseOk{})
	rawExpect[*amqp.ChannelCloseOk](r, 1)
	r.openChannel(1)
}

// --- 5. Malformed input ---

// prFrame encodes one frame.
func prFrame(typ uint8, ch uint16, payload []byte) []byte {
	return amqp.AppendFrame(nil, amqp.Frame{Type: typ, Channel: ch, Payload: payload})
}

func prPublishMethod(ch uint16) []byte {
	return amqp.AppendMethodFrame(nil, ch, &amqp.BasicPublish{RoutingKey: "q"})
}

func prHeader(ch, class uint16, size uint64) []byte {
	return amqp.AppendHeaderFrame(nil, ch, class, size, rawEmptyProps)
}

func prCat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

func TestMalformedInput(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	by := prNewBystander(t, b)

	badEnd := amqp.AppendMethodFrame(nil, 1, &amqp.QueueDeclare{Queue: "x"})
	badEnd[len(badEnd)-1] = 0

	badTable := rawMethodPayload(50, 10, []byte{0, 0, 1, 'q', 0})                  // ticket, queue "q", bits
	badTable = append(badTable, 0, 0, 0, 3, 1, 'k', 'Z')                           // table with type 'Z'
	badProps := amqp.AppendHeaderFrame(nil, 1, 60, 0, []byte{0x20, 0, 0, 0, 0, 9}) // headers flag, table cut short

	for _, tc := range []struct {
		name     string
		frameMax uint32 // tune-ok frame_max; 0 keeps the server's
		input    []byte
		code     uint16
		text     string
		class    uint16 // failing class and method in the close, when non-zero
		method   uint16
	}{
		{name: "garbage", input: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), code: amqp.FrameError, text: "unknown frame type 71"},
		{name: "unknown frame type", input: prFrame(4, 0, nil), code: amqp.FrameError, text: "unknown frame type 4"},
		{name: "oversized frame", frameMax: 4096, input: prFrame(amqp.FrameBody, 1, make([]byte, 4089)), code: amqp.FrameError, text: "frame size 4097 exceeds negotiated maximum 4096"},
		{name: "4 GiB frame claim", input: []byte{1, 0, 1, 0xff, 0xff, 0xff, 0xff}, code: amqp.FrameError, text: "exceeds negotiated maximum 131072"},
		{name: "bad frame end", input: badEnd, code: amqp.FrameError, text: "not frame-end"},
		{name: "method on unopened channel", input: amqp.AppendMethodFrame(nil, 7, &amqp.QueueDeclare{Queue: "x"}), code: amqp.ChannelError, text: "expected 'channel.open' on channel 7", class: 50, method: 10},
		{name: "body on unopened channel", input: prFrame(amqp.FrameBody, 7, []byte("x")), code: amqp.ChannelError, text: "expected 'channel.open' on channel 7"},
		{name: "channel above channel_max", input: amqp.AppendMethodFrame(nil, 65535, &amqp.ChannelOpen{}), code: amqp.NotAllowed, text: "channel number 65535 exceeds negotiated channel_max 2047"},
		{name: "second channel.open", input: amqp.AppendMethodFrame(nil, 1, &amqp.ChannelOpen{}), code: amqp.ChannelError, text: "second 'channel.open'", class: 20, method: 10},
		{name: "body without header", input: prFrame(amqp.FrameBody, 1, []byte("body")), code: amqp.UnexpectedFrame, text: "expected method frame"},
		{name: "header without publish", input: prHeader(1, 60, 4), code: amqp.UnexpectedFrame, text: "expected method frame"},
		{name: "method instead of header", input: prCat(prPublishMethod(1), amqp.AppendMethodFrame(nil, 1, &amqp.QueueDeclare{Queue: "x"})), code: amqp.UnexpectedFrame, text: "expected content header"},
		{name: "body instead of header", input: prCat(prPublishMethod(1), prFrame(amqp.FrameBody, 1, []byte("b"))), code: amqp.UnexpectedFrame, text: "expected content header"},
		{name: "header of wrong class", input: prCat(prPublishMethod(1), prHeader(1, 50, 1)), code: amqp.UnexpectedFrame, text: "got one for class 50"},
		{name: "method instead of body", input: prCat(prPublishMethod(1), prHeader(1, 60, 4), amqp.AppendMethodFrame(nil, 1, &amqp.QueueDeclare{Queue: "x"})), code: amqp.UnexpectedFrame, text: "expected content body"},
		{name: "body longer than declared", input: prCat(prPublishMethod(1), prHeader(1, 60, 2), prFrame(amqp.FrameBody, 1, []byte("four"))), code: amqp.FrameError, text: "exceeds the declared size 2"},
		{name: "short content header", input: prCat(prPublishMethod(1), prFrame(amqp.FrameHeader, 1, []byte{0, 60, 0})), code: amqp.FrameError, text: "content header payload"},
		{name: "bad properties", input: prCat(prPublishMethod(1), badProps), code: amqp.FrameError, text: "cannot decode basic properties"},
		{name: "truncated method arguments", input: prFrame(amqp.FrameMethod, 1, rawMethodPayload(50, 10, []byte{0, 0, 9, 'a'})), code: amqp.FrameError, text: "cannot decode queue.declare", class: 50, method: 10},
		{name: "method payload without ids", input: prFrame(amqp.FrameMethod, 1, []byte{0, 50}), code: amqp.FrameError, text: "too short"},
		{name: "malformed field table", input: prFrame(amqp.FrameMethod, 1, badTable), code: amqp.FrameError, text: "cannot decode queue.declare", class: 50, method: 10},
		{name: "unknown method", input: prFrame(amqp.FrameMethod, 1, rawMethodPayload(60, 99, nil)), code: amqp.CommandInvalid, text: "unknown method class 60 method 99", class: 60, method: 99},
		{name: "unknown class", input: prFrame(amqp.FrameMethod, 1, rawMethodPayload(99, 1, nil)), code: amqp.CommandInvalid, text: "unknown method class 99 method 1", class: 99, method: 1},
		{name: "server method from client", input: amqp.AppendMethodFrame(nil, 1, &amqp.BasicDeliver{ConsumerTag: "x", DeliveryTag: 1}), code: amqp.CommandInvalid, text: "not allowed from a client", class: 60, method: 60},
		{name: "channel method on channel 0", input: amqp.AppendMethodFrame(nil, 0, &amqp.QueueDeclare{Queue: "x"}), code: amqp.CommandInvalid, text: "on channel 0", class: 50, method: 10},
		{name: "content frame on channel 0", input: prFrame(amqp.FrameBody, 0, []byte("x")), code: amqp.UnexpectedFrame, text: "channel 0"},
		{name: "heartbeat on channel 1", input: prFrame(amqp.FrameHeartbeat, 1, nil), code: amqp.FrameError, text: "heartbeat frame on channel 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, b.Addr)
			r.handshake(rawOpts{TuneOk: func(tu amqp.ConnectionTune) amqp.ConnectionTuneOk {
				fm := tu.FrameMax
				if tc.frameMax != 0 {
					fm = tc.frameMax
				}
				return amqp.ConnectionTuneOk{ChannelMax: tu.ChannelMax, FrameMax: fm}
			}})
			r.openChannel(1)
			r.mustWrite(tc.input)
			cl := r.expectConnectionClose(tc.code)
			if !strings.Contains(cl.ReplyText, tc.text) {
				t.Errorf("reply text %q, want it to contain %q", cl.ReplyText, tc.text)
			}
			if tc.class != 0 && (cl.FailingClassID != tc.class || cl.FailingMethodID != tc.method) {
				t.Errorf("close names method %d.%d, want %d.%d", cl.FailingClassID, cl.FailingMethodID, tc.class, tc.method)
			}
			by.check(t)
		})
	}
}

// Garbage in place of the handshake's methods is a frame error too.
func TestMalformedHandshake(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	by := prNewBystander(t, b)
	t.Run("garbage start-ok", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.start()
		r.mustWrite([]byte("\x01\x00\x00\x00\x00\x00\x02\x00\x0a\x00"))
		r.expectConnectionClose(amqp.FrameError)
	})
	t.Run("open before tune-ok", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.start()
		r.startOk(rawOpts{})
		rawExpect[*amqp.ConnectionTune](r, 0)
		r.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
		cl := r.expectConnectionClose(amqp.CommandInvalid)
		if !strings.Contains(cl.ReplyText, "expected 'connection.tune-ok'") {
			t.Fatalf("reply text %q", cl.ReplyText)
		}
	})
	t.Run("oversized start-ok", func(t *testing.T) {
		// Before tune the server accepts frames up to 8192 bytes only.
		r := dialRaw(t, b.Addr)
		r.start()
		r.mustWrite(prFrame(amqp.FrameMethod, 0, make([]byte, 9000)))
		r.expectConnectionClose(amqp.FrameError)
	})
	t.Run("unknown mechanism", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.start()
		r.startOk(rawOpts{Mechanism: "EXTERNAL"})
		r.expectConnectionClose(amqp.CommandInvalid)
	})
	by.check(t)
}

// Randomly corrupted frame streams: whatever the server makes of them, it
// ends the connection (or keeps serving it) without crashing and without
// touching other connections.
func TestCorruptedStreams(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	by := prNewBystander(t, b)
	valid := prCat(
		amqp.AppendMethodFrame(nil, 1, &amqp.QueueDeclare{Queue: "fuzz", Arguments: amqp.Table{{Key: "x-max-length", Value: int32(10)}}}),
		amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "fuzz"}),
		amqp.AppendHeaderFrame(nil, 1, 60, 5, []byte{0x10, 0, 2}), // delivery-mode 2
		prFrame(amqp.FrameBody, 1, []byte("hello")),
		amqp.AppendMethodFrame(nil, 1, &amqp.BasicGet{Queue: "fuzz", NoAck: true}),
		amqp.AppendMethodFrame(nil, 1, &amqp.QueueDelete{Queue: "fuzz"}),
	)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		in := bytes.Clone(valid)
		for range 1 + rng.IntN(4) {
			in[rng.IntN(len(in))] = byte(rng.IntN(256))
		}
		r := dialRawOpen(t, b.Addr)
		r.openChannel(1)
		if err := r.write(in); err != nil {
			t.Fatalf("case %d: write: %v", i, err)
		}
		// End of input: the server must then finish the connection.
		r.nc.(*net.TCPConn).CloseWrite()
		r.expectHangup(prWait)
	}
	by.check(t)
}

// --- 7. Second clients ---

func TestAmqpTools(t *testing.T) {
	for _, tool := range []string{"amqp-declare-queue", "amqp-publish", "amqp-get", "amqp-consume"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not on PATH (Debian package amqp-tools): %v", tool, err)
		}
	}
	b := brokertest.Start(t, brokertest.Config{})
	// librabbitmq reads the vhost from the URL path: none means "/".
	url := strings.TrimSuffix(b.URL, "/")
	run := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, append([]string{"--url=" + url}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	if out := run("amqp-declare-queue", "-q", "tools"); strings.TrimSpace(out) != "tools" {
		t.Fatalf("amqp-declare-queue printed %q, want the queue name", out)
	}
	run("amqp-publish", "-r", "tools", "-b", "from amqp-publish")
	run("amqp-publish", "-r", "tools", "-b", "second message")
	if out := run("amqp-get", "-q", "tools"); out != "from amqp-publish" {
		t.Fatalf("amqp-get printed %q", out)
	}
	if out := run("amqp-consume", "-q", "tools", "-c", "1", "cat"); out != "second message" {
		t.Fatalf("amqp-consume printed %q", out)
	}
	// Both messages were acked: the queue is empty.
	_, ch := b.Channel(t)
	q, err := ch.QueueDeclarePassive("tools", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 0 {
		t.Fatalf("%d messages left in the queue", q.Messages)
	}
}

// prPikaScript publishes with confirms, consumes, acks, and prints what it saw.
const prPikaScript = `
import sys, pika
params = pika.URLParameters(sys.argv[1])
conn = pika.BlockingConnection(params)
ch = conn.channel()
ch.confirm_delivery()
ch.queue_declare(queue="pika", durable=True)
for i in range(3):
    ch.basic_publish(exchange="", routing_key="pika", body=("msg-%d" % i).encode(),
                     properties=pika.BasicProperties(delivery_mode=2, headers={"n": i}),
                     mandatory=True)
print("confirmed 3")
got = []
for method, props, body in ch.consume("pika", inactivity_timeout=5):
    if method is None:
        break
    got.append("%s:%d" % (body.decode(), props.headers["n"]))
    ch.basic_ack(method.delivery_tag)
    if len(got) == 3:
        break
ch.cancel()
print("got " + ",".join(got))
ok = ch.queue_declare(queue="pika", passive=True)
print("left %d" % ok.method.message_count)
try:
    ch.basic_publish(exchange="", routing_key="nowhere", body=b"x", mandatory=True)
    print("unroutable confirmed")
except pika.exceptions.UnroutableError:
    print("unroutable returned")
conn.close()
`

func TestPika(t *testing.T) {
	// python3 on PATH may be a different interpreter than the one the
	// Debian package python3-pika installs into.
	python := ""
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import pika").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		t.Skip(`no python3 can "import pika" (Debian package python3-pika)`)
	}
	b := brokertest.Start(t, brokertest.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", prPikaScript, strings.TrimSuffix(b.URL, "/")+"/%2F")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pika script: %v\n%s", err, out)
	}
	want := "confirmed 3\ngot msg-0:0,msg-1:1,msg-2:2\nleft 0\nunroutable returned\n"
	if string(out) != want {
		t.Fatalf("pika script printed:\n%s\nwant:\n%s", out, want)
	}
}

// TestConsumeOkPrecedesDeliveries: basic.consume-ok is the first thing a
// new consumer sees, even when another goroutine dispatches to the queue
// the moment the consumer is added (here a confirmed publish from a second
// connection, made from that very moment): a client that learns its
// consumer tag from consume-ok (the Java client, the bench's raw client)
// cannot handle a delivery that overtakes it.
func TestConsumeOkPrecedesDeliveries(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c := b.Dial(t)
	pch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pch.QueueDeclare("q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := pch.NotifyPublish(make(chan amqp091.Confirmation, 1))
	var hookErr error
	defer broker.SetConsumerAddedHookForTest(func() {
		// The confirm comes after the message was routed and handed to
		// the queue's consumer: the delivery is written by then.
		if err := pch.Publish("", "q", false, false, amqp091.Publishing{Body: []byte("m")}); err != nil {
			hookErr = err
			return
		}
		if c := <-confirms; !c.Ack {
			hookErr = fmt.Errorf("publish nacked")
		}
	})()
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	r.send(1, &amqp.BasicConsume{Queue: "q", ConsumerTag: "c", NoAck: true})
	if ok := rawExpect[*amqp.BasicConsumeOk](r, 1); ok.ConsumerTag != "c" {
		t.Fatalf("consume-ok for %q, want c", ok.ConsumerTag)
	}
	if d := rawExpect[*amqp.BasicDeliver](r, 1); d.ConsumerTag != "c" {
		t.Fatalf("delivery to %q, want c", d.ConsumerTag)
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}
}
