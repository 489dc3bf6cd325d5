// rawConn, a raw AMQP client for the protocol tests.

package broker_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/brokerd/brokerd/amqp"
)

// rawConn is an AMQP client built on the amqp package's codec, for the
// input a standard client cannot produce: bad frames, odd tune values,
// silence. Its methods fail the test on anything unexpected.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	fr *amqp.FrameReader
}

// rawWait bounds every read a raw client expects to complete.
const rawWait = 5 * time.Second

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, rawWait)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, fr: amqp.NewFrameReader(nc)}
}

// write sends b; the error is returned because a server that has hung up
// may refuse it.
func (r *rawConn) write(b []byte) error {
	r.nc.SetWriteDeadline(time.Now().Add(rawWait))
	_, err := r.nc.Write(b)
	return err
}

func (r *rawConn) mustWrite(b []byte) {
	r.t.Helper()
	if err := r.write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// send writes a method frame.
func (r *rawConn) send(ch uint16, m amqp.Method) {
	r.t.Helper()
	r.mustWrite(amqp.AppendMethodFrame(nil, ch, m))
}

// next reads one frame within d. The payload is copied.
func (r *rawConn) next(d time.Duration) (amqp.Frame, error) {
	r.nc.SetReadDeadline(time.Now().Add(d))
	f, err := r.fr.ReadFrame()
	if err != nil {
		return f, err
	}
	f.Payload = append([]byte(nil), f.Payload...)
	return f, nil
}

// frame reads the next frame other than a heartbeat.
func (r *rawConn) frame() amqp.Frame {
	r.t.Helper()
	for {
		f, err := r.next(rawWait)
		if err != nil {
			r.t.Fatalf("read frame: %v", err)
		}
		if f.Type != amqp.FrameHeartbeat {
			return f
		}
	}
}

// method reads the next method frame (heartbeats skipped) and checks its
// channel.
func (r *rawConn) method(ch uint16) amqp.Method {
	r.t.Helper()
	f := r.frame()
	if f.Type != amqp.FrameMethod {
		r.t.Fatalf("got frame type %d on channel %d, want a method on channel %d", f.Type, f.Channel, ch)
	}
	m, err := amqp.DecodeMethod(f.Payload)
	if err != nil {
		r.t.Fatalf("decode method: %v", err)
	}
	if f.Channel != ch {
		if c, isClose := m.(*amqp.ConnectionClose); isClose {
			r.t.Fatalf("got connection.close %d %q, want a method on channel %d", c.ReplyCode, c.ReplyText, ch)
		}
		r.t.Fatalf("got %s on channel %d, want channel %d", m.Name(), f.Channel, ch)
	}
	return m
}

// rawExpect reads the next method on ch and checks that it is an M.
func rawExpect[M amqp.Method](r *rawConn, ch uint16) M {
	r.t.Helper()
	m := r.method(ch)
	want, ok := m.(M)
	if !ok {
		if c, isClose := m.(*amqp.ConnectionClose); isClose {
			r.t.Fatalf("got connection.close %d %q, want %T", c.ReplyCode, c.ReplyText, want)
		}
		if c, isClose := m.(*amqp.ChannelClose); isClose {
			r.t.Fatalf("got channel.close %d %q, want %T", c.ReplyCode, c.ReplyText, want)
		}
		r.t.Fatalf("got %s, want %T", m.Name(), want)
	}
	return want
}

// rawOpts are the client's side of the handshake. Zero values: guest/guest
// over PLAIN, vhost "/", the server's channel_max and frame_max, and no
// heartbeats.
type rawOpts struct {
	User, Password string
	Mechanism      string
	Response       []byte // overrides the SASL response built from User/Password
	ClientProps    amqp.Table
	VHost          string
	// TuneOk computes tune-ok from the server's tune; nil accepts the
	// server's channel_max and frame_max with heartbeat 0.
	TuneOk func(amqp.ConnectionTune) amqp.ConnectionTuneOk
}

func (o *rawOpts) defaults() {
	if o.User == "" && o.Password == "" {
		o.User, o.Password = "guest", "guest"
	}
	if o.Mechanism == "" {
		o.Mechanism = "PLAIN"
	}
	if o.VHost == "" {
		o.VHost = "/"
	}
	if o.TuneOk == nil {
		o.TuneOk = func(t amqp.ConnectionTune) amqp.ConnectionTuneOk {
			return amqp.ConnectionTuneOk{ChannelMax: t.ChannelMax, FrameMax: t.FrameMax}
		}
	}
}

// start sends the protocol header and returns connection.start.
func (r *rawConn) start() *amqp.ConnectionStart {
	r.t.Helper()
	r.mustWrite(amqp.ProtocolHeader[:])
	return rawExpect[*amqp.ConnectionStart](r, 0)
}

// startOk sends start-ok for o.
func (r *rawConn) startOk(o rawOpts) {
	r.t.Helper()
	o.defaults()
	resp := o.Response
	if resp == nil {
		resp = []byte("\x00" + o.User + "\x00" + o.Password)
	}
	r.send(0, &amqp.ConnectionStartOk{
		ClientProperties: o.ClientProps,
		Mechanism:        o.Mechanism,
		Response:         string(resp),
		Locale:           "en_US",
	})
}

// tune reads connection.tune, answers with o.TuneOk and adopts the
// negotiated frame_max for reading.
func (r *rawConn) tune(o rawOpts) (amqp.ConnectionTune, amqp.ConnectionTuneOk) {
	r.t.Helper()
	o.defaults()
	tune := *rawExpect[*amqp.ConnectionTune](r, 0)
	ok := o.TuneOk(tune)
	r.send(0, &ok)
	fm := ok.FrameMax
	if fm == 0 {
		fm = tune.FrameMax
	}
	r.fr.SetMaxFrameSize(fm)
	return tune, ok
}

// handshake runs the whole handshake up to open-ok and returns the
// negotiated tune-ok.
func (r *rawConn) handshake(o rawOpts) amqp.ConnectionTuneOk {
	r.t.Helper()
	o.defaults()
	r.start()
	r.startOk(o)
	_, ok := r.tune(o)
	r.send(0, &amqp.ConnectionOpen{VirtualHost: o.VHost})
	rawExpect[*amqp.ConnectionOpenOk](r, 0)
	return ok
}

// dialRawOpen connects and completes the handshake with the defaults.
func dialRawOpen(t testing.TB, addr string) *rawConn {
	t.Helper()
	r := dialRaw(t, addr)
	r.handshake(rawOpts{})
	return r
}

func (r *rawConn) openChannel(ch uint16) {
	r.t.Helper()
	r.send(ch, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, ch)
}

// publish sends basic.publish with its header and body frames split by
// frameMax.
func (r *rawConn) publish(ch uint16, exchange, key string, body []byte, frameMax uint32) {
	r.t.Helper()
	b := amqp.AppendMethodFrame(nil, ch, &amqp.BasicPublish{Exchange: exchange, RoutingKey: key})
	b = amqp.AppendHeaderFrame(b, ch, 60, uint64(len(body)), rawEmptyProps)
	b = amqp.AppendBodyFrames(b, ch, body, frameMax)
	r.mustWrite(b)
}

// rawEmptyProps is a content header property list with no property set.
var rawEmptyProps = []byte{0, 0}

// expectConnectionClose reads until connection.close (other channels'
// frames and heartbeats are skipped), checks its code, answers close-ok
// and checks that the server then hangs up.
func (r *rawConn) expectConnectionClose(code uint16) *amqp.ConnectionClose {
	r.t.Helper()
	for {
		f, err := r.next(rawWait)
		if err != nil {
			r.t.Fatalf("waiting for connection.close %d: %v", code, err)
		}
		if f.Type != amqp.FrameMethod || f.Channel != 0 {
			continue
		}
		m, err := amqp.DecodeMethod(f.Payload)
		if err != nil {
			r.t.Fatalf("decode method: %v", err)
		}
		c, ok := m.(*amqp.ConnectionClose)
		if !ok {
			r.t.Fatalf("got %s on channel 0, want connection.close %d", m.Name(), code)
		}
		if c.ReplyCode != code {
			r.t.Fatalf("connection.close %d %q, want code %d", c.ReplyCode, c.ReplyText, code)
		}
		// The server may already have hung up (it cannot read past a
		// frame error), so the close-ok may not get through.
		_ = r.write(amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionCloseOk{}))
		r.expectHangup(rawWait)
		return c
	}
}

// expectHangup reads (discarding heartbeats and anything else) until the
// server closes the socket, failing if that takes longer than d. It returns
// the time it took.
func (r *rawConn) expectHangup(d time.Duration) time.Duration {
	r.t.Helper()
	_, took := r.drain(d)
	return took
}

// drain returns every byte the server sends until it closes the socket,
// and the time that took; it fails the test if that takes longer than d.
func (r *rawConn) drain(d time.Duration) ([]byte, time.Duration) {
	r.t.Helper()
	start := time.Now()
	r.nc.SetReadDeadline(start.Add(d))
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := r.nc.Read(buf)
		got = append(got, buf[:n]...)
		if err == nil {
			continue
		}
		if rawIsHangup(err) {
			return got, time.Since(start)
		}
		r.t.Fatalf("server did not close the connection within %v: %v", d, err)
	}
}

// rawIsHangup reports whether a read error means the peer closed the socket.
func rawIsHangup(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// rawIsTimeout reports whether a read error is a deadline.
func rawIsTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// rawMethodPayload returns a method frame payload: class and method ids
// followed by args, as given.
func rawMethodPayload(classID, methodID uint16, args []byte) []byte {
	p := binary.BigEndian.AppendUint16(nil, classID)
	p = binary.BigEndian.AppendUint16(p, methodID)
	return append(p, args...)
}
