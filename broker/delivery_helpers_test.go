// Helpers of the delivery tests (dv*) and dvWire, a raw AMQP client.

package broker_test

// Helpers, prefixed dv, for the delivery tests (delivery_*_test.go) and
// the confirm, paging, persistence and transaction tests: consuming,
// receiving and acknowledging through amqp091-go against a real broker
// (declaring, publishing and getting are brokertest.Session's verbs), and
// dvWire, a raw client for what amqp091-go hides.

import (
	"errors"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func dvNumbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func dvConsume(t testing.TB, ch *brokertest.Session, q, tag string, noAck bool, args amqp091.Table) <-chan amqp091.Delivery {
	t.Helper()
	msgs, err := ch.Consume(q, tag, noAck, false, false, false, args)
	if err != nil {
		t.Fatalf("consume %q: %v", q, err)
	}
	return msgs
}

func dvRecv(t testing.TB, msgs <-chan amqp091.Delivery) amqp091.Delivery {
	t.Helper()
	select {
	case d, ok := <-msgs:
		if !ok {
			t.Fatal("delivery channel closed")
		}
		return d
	case <-time.After(brokertest.Wait):
		t.Fatal("no delivery")
	}
	panic("unreachable")
}

func dvRecvN(t testing.TB, msgs <-chan amqp091.Delivery, n int) []amqp091.Delivery {
	t.Helper()
	out := make([]amqp091.Delivery, n)
	for i := range out {
		out[i] = dvRecv(t, msgs)
	}
	return out
}

func dvBodies(ds []amqp091.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Body)
	}
	return out
}

func dvWantBodies(t testing.TB, what string, ds []amqp091.Delivery, want ...string) {
	t.Helper()
	if got := dvBodies(ds); !slices.Equal(got, want) {
		t.Fatalf("%s: bodies %q, want %q", what, got, want)
	}
}

// dvNotifyClose must be called before the close is provoked.
func dvNotifyClose(ch *brokertest.Session) chan *amqp091.Error {
	return ch.NotifyClose(make(chan *amqp091.Error, 1))
}

func dvAwaitClose(t testing.TB, c chan *amqp091.Error, code int, reason string) {
	t.Helper()
	select {
	case e, ok := <-c:
		if !ok || e == nil {
			t.Fatalf("closed without an error, want %d %q", code, reason)
		}
		if e.Code != code || e.Reason != reason {
			t.Fatalf("closed with %d %q, want %d %q", e.Code, e.Reason, code, reason)
		}
	case <-time.After(brokertest.Wait):
		t.Fatalf("not closed; want %d %q", code, reason)
	}
}

func dvWantErr(t testing.TB, err error, code int, reason string) {
	t.Helper()
	var e *amqp091.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want %d %q", err, err, code, reason)
	}
	if e.Code != code || e.Reason != reason {
		t.Fatalf("error %d %q, want %d %q", e.Code, e.Reason, code, reason)
	}
}

func dvAck(t testing.TB, d amqp091.Delivery, multiple bool) {
	t.Helper()
	if err := d.Ack(multiple); err != nil {
		t.Fatalf("ack %d: %v", d.DeliveryTag, err)
	}
}

func dvConfirmChannel(t testing.TB, ch *brokertest.Session, n int) chan amqp091.Confirmation {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatalf("confirm.select: %v", err)
	}
	return ch.NotifyPublish(make(chan amqp091.Confirmation, n))
}

func dvConfirm(t testing.TB, confirms chan amqp091.Confirmation) amqp091.Confirmation {
	t.Helper()
	select {
	case c, ok := <-confirms:
		if !ok {
			t.Fatal("confirm channel closed")
		}
		return c
	case <-time.After(brokertest.Wait):
		t.Fatal("no confirm")
	}
	panic("unreachable")
}

// --- the wire: what amqp091 hides ---

// dvWire is a minimal AMQP client over brokerd's own codec, for what
// amqp091-go hides: the exact property bytes and header order,
// server-generated consumer tags, and a consumer that stops reading its
// socket. Channel 1 is open after dvDialWire.
type dvWire struct {
	t        testing.TB
	nc       net.Conn
	fr       *amqp.FrameReader
	frameMax uint32
}

func dvDialWire(t testing.TB, addr string, rcvBuf int) *dvWire {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if rcvBuf > 0 {
		if err := nc.(*net.TCPConn).SetReadBuffer(rcvBuf); err != nil {
			t.Fatal(err)
		}
	}
	w := &dvWire{t: t, nc: nc, fr: amqp.NewFrameReader(nc)}
	w.write(amqp.ProtocolHeader[:])
	dvExpectMethod[*amqp.ConnectionStart](w, 0)
	w.send(0, &amqp.ConnectionStartOk{
		ClientProperties: amqp.Table{{Key: "capabilities", Value: amqp.Table{{Key: "consumer_cancel_notify", Value: true}}}},
		Mechanism:        "PLAIN",
		Response:         "\x00guest\x00guest",
		Locale:           "en_US",
	})
	tune := dvExpectMethod[*amqp.ConnectionTune](w, 0)
	w.frameMax = tune.FrameMax
	w.send(0, &amqp.ConnectionTuneOk{ChannelMax: tune.ChannelMax, FrameMax: tune.FrameMax})
	w.fr.SetMaxFrameSize(tune.FrameMax)
	w.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
	dvExpectMethod[*amqp.ConnectionOpenOk](w, 0)
	w.send(1, &amqp.ChannelOpen{})
	dvExpectMethod[*amqp.ChannelOpenOk](w, 1)
	return w
}

func (w *dvWire) write(b []byte) {
	w.t.Helper()
	w.nc.SetWriteDeadline(time.Now().Add(brokertest.Wait))
	if _, err := w.nc.Write(b); err != nil {
		w.t.Fatalf("write: %v", err)
	}
}

func (w *dvWire) send(ch uint16, m amqp.Method) {
	w.t.Helper()
	w.write(amqp.AppendMethodFrame(nil, ch, m))
}

func (w *dvWire) publish(ch uint16, m *amqp.BasicPublish, rawProps, body []byte) {
	w.t.Helper()
	buf := amqp.AppendMethodFrame(nil, ch, m)
	buf = amqp.AppendHeaderFrame(buf, ch, 60, uint64(len(body)), rawProps)
	buf = amqp.AppendBodyFrames(buf, ch, body, w.frameMax)
	w.write(buf)
}

// frame returns the next non-heartbeat frame; its payload is a copy.
func (w *dvWire) frame() amqp.Frame {
	w.t.Helper()
	for {
		w.nc.SetReadDeadline(time.Now().Add(brokertest.Wait))
		f, err := w.fr.ReadFrame()
		if err != nil {
			w.t.Fatalf("read frame: %v", err)
		}
		if f.Type == amqp.FrameHeartbeat {
			continue
		}
		f.Payload = slices.Clone(f.Payload)
		return f
	}
}

func (w *dvWire) method(ch uint16) amqp.Method {
	w.t.Helper()
	f := w.frame()
	if f.Type != amqp.FrameMethod || f.Channel != ch {
		w.t.Fatalf("frame type %d on channel %d, want a method on channel %d", f.Type, f.Channel, ch)
	}
	m, err := amqp.DecodeMethod(f.Payload)
	if err != nil {
		w.t.Fatalf("decode method: %v", err)
	}
	return m
}

func dvExpectMethod[M amqp.Method](w *dvWire, ch uint16) M {
	w.t.Helper()
	m := w.method(ch)
	got, ok := m.(M)
	if !ok {
		w.t.Fatalf("got %s (%+v), want %T", m.Name(), m, got)
	}
	return got
}

// content reads a content method with its header and body.
func (w *dvWire) content(ch uint16) (m amqp.Method, rawProps, body []byte) {
	w.t.Helper()
	m = w.method(ch)
	if !m.HasContent() {
		w.t.Fatalf("got %s (%+v), want a content method", m.Name(), m)
	}
	f := w.frame()
	if f.Type != amqp.FrameHeader {
		w.t.Fatalf("frame type %d after %s, want a content header", f.Type, m.Name())
	}
	_, size, raw, err := amqp.ParseContentHeader(f.Payload)
	if err != nil {
		w.t.Fatal(err)
	}
	body = make([]byte, 0, size)
	for uint64(len(body)) < size {
		f := w.frame()
		if f.Type != amqp.FrameBody {
			w.t.Fatalf("frame type %d in a body", f.Type)
		}
		body = append(body, f.Payload...)
	}
	return m, raw, body
}

func dvEncodeProps(t testing.TB, p amqp.Properties) []byte {
	t.Helper()
	raw, err := p.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
