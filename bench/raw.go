package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/brokerd/brokerd/amqp"
)

// The raw client (-client raw): AMQP 0-9-1 spoken directly over brokerd's
// amqp codec, one goroutine per connection, writes batched in a buffer
// that is flushed only before the client waits (for confirms, for the
// next delivery when nothing more is buffered to read, or before a pause
// of -rate). A publish is three frames appended to that buffer; the method
// and content header are encoded once per run (per message only with a
// per-message expiration). So one process can offer several hundred
// thousand messages a second, and what it measures is the broker, not the
// client. It does what the benchmark needs and nothing more: one channel,
// no heartbeats, no returns.

// rawConn is one connection with channel 1 open.
type rawConn struct {
	nc       net.Conn
	w        *bufio.Writer
	fr       *amqp.FrameReader
	frameMax uint32
	buf      []byte // scratch for encoding
}

// rawDial connects to rawURL (amqp://user:pass@host:port/vhost), logs in
// with PLAIN and opens channel 1.
func rawDial(rawURL string) (*rawConn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "amqp" {
		return nil, fmt.Errorf("raw client: scheme %q not supported (amqp only)", u.Scheme)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5672")
	}
	user, pass := "guest", "guest"
	if u.User != nil {
		user = u.User.Username()
		if p, ok := u.User.Password(); ok {
			pass = p
		}
	}
	vhost := "/"
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		if vhost, err = url.PathUnescape(p); err != nil {
			return nil, err
		}
	}
	nc, err := net.DialTimeout("tcp", host, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c := &rawConn{nc: nc, w: bufio.NewWriterSize(nc, 256<<10), fr: amqp.NewFrameReader(nc)}
	if err := c.handshake(user, pass, vhost); err != nil {
		nc.Close()
		return nil, fmt.Errorf("raw client: %w", err)
	}
	return c, nil
}

func (c *rawConn) handshake(user, pass, vhost string) error {
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.nc.SetDeadline(time.Time{})
	if _, err := c.w.WriteString("AMQP\x00\x00\x09\x01"); err != nil {
		return err
	}
	if err := c.w.Flush(); err != nil {
		return err
	}
	if _, err := expect[*amqp.ConnectionStart](c, 0); err != nil {
		return err
	}
	c.send(0, &amqp.ConnectionStartOk{
		ClientProperties: amqp.Table{{Key: "product", Value: "brokerd bench (raw)"}},
		Mechanism:        "PLAIN", Response: "\x00" + user + "\x00" + pass, Locale: "en_US",
	})
	if err := c.w.Flush(); err != nil {
		return err
	}
	tune, err := expect[*amqp.ConnectionTune](c, 0)
	if err != nil {
		return err
	}
	c.frameMax = tune.FrameMax
	if c.frameMax == 0 || c.frameMax > 1<<20 {
		c.frameMax = 1 << 20
	}
	c.fr.SetMaxFrameSize(c.frameMax)
	c.send(0, &amqp.ConnectionTuneOk{ChannelMax: 1, FrameMax: c.frameMax})
	c.send(0, &amqp.ConnectionOpen{VirtualHost: vhost})
	if _, err := c.call(0, nil); err != nil { // flush, then open-ok
		return err
	}
	c.send(1, &amqp.ChannelOpen{})
	_, err = c.call(1, nil)
	return err
}

// send appends a method frame to the write buffer.
func (c *rawConn) send(ch uint16, m amqp.Method) {
	c.buf = amqp.AppendMethodFrame(c.buf[:0], ch, m)
	c.w.Write(c.buf)
}

// call sends m (if not nil), flushes, and returns the next method on ch,
// which must be a synchronous reply (anything but a close).
func (c *rawConn) call(ch uint16, m amqp.Method) (amqp.Method, error) {
	if m != nil {
		c.send(ch, m)
	}
	if err := c.w.Flush(); err != nil {
		return nil, err
	}
	return c.method(ch)
}

// method reads the next method frame on ch, skipping heartbeats; a
// connection or channel close is returned as an error.
func (c *rawConn) method(ch uint16) (amqp.Method, error) {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		if f.Type == amqp.FrameHeartbeat {
			continue
		}
		if f.Type != amqp.FrameMethod {
			return nil, fmt.Errorf("frame type %d on channel %d, want a method", f.Type, f.Channel)
		}
		m, err := amqp.DecodeMethod(f.Payload)
		if err != nil {
			return nil, err
		}
		if err := closeError(m); err != nil {
			return nil, err
		}
		if f.Channel != ch {
			return nil, fmt.Errorf("%s on channel %d, want channel %d", m.Name(), f.Channel, ch)
		}
		return m, nil
	}
}

func closeError(m amqp.Method) error {
	switch m := m.(type) {
	case *amqp.ConnectionClose:
		return fmt.Errorf("connection closed by the broker: %d %s", m.ReplyCode, m.ReplyText)
	case *amqp.ChannelClose:
		return fmt.Errorf("channel closed by the broker: %d %s", m.ReplyCode, m.ReplyText)
	}
	return nil
}

func expect[M amqp.Method](c *rawConn, ch uint16) (M, error) {
	var zero M
	m, err := c.method(ch)
	if err != nil {
		return zero, err
	}
	want, ok := m.(M)
	if !ok {
		return zero, fmt.Errorf("got %s, want %T", m.Name(), zero)
	}
	return want, nil
}

// close closes channel 1 (a barrier: the broker has handled everything
// sent before it answers close-ok), then the connection.
func (c *rawConn) close() error {
	defer c.nc.Close()
	c.send(1, &amqp.ChannelClose{ReplyCode: 200, ReplyText: "bye"})
	if err := c.w.Flush(); err != nil {
		return err
	}
	for { // deliveries and confirms may still be on their way
		f, err := c.fr.ReadFrame()
		if err != nil {
			return err
		}
		if f.Type != amqp.FrameMethod || f.Channel != 1 {
			continue
		}
		m, err := amqp.DecodeMethod(f.Payload)
		if err != nil {
			return err
		}
		if _, ok := m.(*amqp.ChannelCloseOk); ok {
			break
		}
		if err := closeError(m); err != nil {
			return err
		}
	}
	c.send(0, &amqp.ConnectionClose{ReplyCode: 200, ReplyText: "bye"})
	if err := c.w.Flush(); err != nil {
		return err
	}
	_, err := expect[*amqp.ConnectionCloseOk](c, 0)
	return err
}

// rawPublisher is the publishing side of a raw connection.
type rawPublisher struct {
	c *rawConn
	// head is the pre-encoded basic.publish frame and content header up
	// to the body size (the props follow it), for the last expiration.
	exchange, key string
	persistent    bool
	method        []byte
	props         []byte
	expiration    string
	// confirms that arrived but were not taken yet: acks then nacks
	// are counted per tag run, in order.
	confirming bool
	nextTag    uint64 // tag of the next publish
	doneTag    uint64 // every tag up to it is confirmed
	pending    []bool // confirms arrived, oldest first, not yet taken
}

func newRawPublisher(c *rawConn, exchange, key string, persistent, confirm bool) (*rawPublisher, error) {
	p := &rawPublisher{c: c, exchange: exchange, key: key, persistent: persistent, nextTag: 1}
	p.method = amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{Exchange: exchange, RoutingKey: key})
	p.setProps("")
	if confirm {
		if _, err := c.call(1, &amqp.ConfirmSelect{}); err != nil {
			return nil, fmt.Errorf("confirm.select: %w", err)
		}
		p.confirming = true
	}
	return p, nil
}

func (p *rawPublisher) setProps(expiration string) {
	props := amqp.Properties{Flags: amqp.FlagDeliveryMode, DeliveryMode: 1}
	if p.persistent {
		props.DeliveryMode = 2
	}
	if expiration != "" {
		props.Flags |= amqp.FlagExpiration
		props.Expiration = expiration
	}
	p.props, _ = props.Append(p.props[:0])
	p.expiration = expiration
}

// publish appends one message to the write buffer.
func (p *rawPublisher) publish(body []byte, expiration string) error {
	if expiration != p.expiration {
		p.setProps(expiration)
	}
	c := p.c
	c.w.Write(p.method)
	c.buf = amqp.AppendHeaderFrame(c.buf[:0], 1, 60, uint64(len(body)), p.props)
	c.buf = amqp.AppendBodyFrames(c.buf, 1, body, c.frameMax)
	_, err := c.w.Write(c.buf)
	p.nextTag++
	return err
}

func (p *rawPublisher) flush() error { return p.c.w.Flush() }

// confirm returns the next publish's confirm (ack or nack), in publish
// order, reading from the broker when none has arrived yet.
func (p *rawPublisher) confirm() (bool, error) {
	for len(p.pending) == 0 {
		if err := p.c.w.Flush(); err != nil {
			return false, err
		}
		m, err := p.c.method(1)
		if err != nil {
			return false, err
		}
		var tag uint64
		var multiple, ack bool
		switch m := m.(type) {
		case *amqp.BasicAck:
			tag, multiple, ack = m.DeliveryTag, m.Multiple, true
		case *amqp.BasicNack:
			tag, multiple = m.DeliveryTag, m.Multiple
		default:
			return false, fmt.Errorf("got %s while awaiting confirms", m.Name())
		}
		if tag <= p.doneTag || tag >= p.nextTag {
			return false, fmt.Errorf("confirm of tag %d, outside the pending %d..%d", tag, p.doneTag+1, p.nextTag-1)
		}
		if !multiple && tag != p.doneTag+1 {
			return false, fmt.Errorf("confirm of tag %d out of order (next is %d)", tag, p.doneTag+1)
		}
		for ; p.doneTag < tag; p.doneTag++ {
			p.pending = append(p.pending, ack)
		}
	}
	ack := p.pending[0]
	p.pending = p.pending[1:]
	return ack, nil
}

// rawSubscriber is the consuming side of a raw connection.
type rawSubscriber struct {
	c    *rawConn
	body []byte // the delivery being assembled
}

func newRawSubscriber(c *rawConn, queue string, prefetch int, noAck bool) (*rawSubscriber, error) {
	if !noAck {
		if _, err := c.call(1, &amqp.BasicQos{PrefetchCount: uint16(min(prefetch, 65535))}); err != nil {
			return nil, fmt.Errorf("qos: %w", err)
		}
	}
	if _, err := c.call(1, &amqp.BasicConsume{Queue: queue, NoAck: noAck}); err != nil {
		return nil, fmt.Errorf("consume %s: %w", queue, err)
	}
	return &rawSubscriber{c: c}, nil
}

// next returns the next delivery's tag and body (valid until the next
// call). Acks written since the last read go out first when nothing more
// is buffered to read: one write per burst.
func (s *rawSubscriber) next() (uint64, []byte, error) {
	c := s.c
	var tag uint64
	var size uint64
	have := false
	s.body = s.body[:0]
	for {
		if c.fr.Buffered() == 0 && c.w.Buffered() > 0 {
			if err := c.w.Flush(); err != nil {
				return 0, nil, err
			}
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			// Stopped (close) or failed: the acks written so far still go
			// out, or the broker would deliver those messages again.
			c.w.Flush()
			c.nc.Close()
			return 0, nil, err
		}
		switch f.Type {
		case amqp.FrameHeartbeat:
			continue
		case amqp.FrameMethod:
			m, err := amqp.DecodeMethod(f.Payload)
			if err != nil {
				return 0, nil, err
			}
			if err := closeError(m); err != nil {
				return 0, nil, err
			}
			d, ok := m.(*amqp.BasicDeliver)
			if !ok {
				return 0, nil, fmt.Errorf("got %s while consuming", m.Name())
			}
			tag, have = d.DeliveryTag, false
		case amqp.FrameHeader:
			_, size, _, err = amqp.ParseContentHeader(f.Payload)
			if err != nil {
				return 0, nil, err
			}
			have = true
			if size == 0 {
				return tag, s.body, nil
			}
		case amqp.FrameBody:
			if !have {
				return 0, nil, errors.New("body frame without a content header")
			}
			s.body = append(s.body, f.Payload...)
			if uint64(len(s.body)) >= size {
				return tag, s.body, nil
			}
		}
	}
}

func (s *rawSubscriber) ack(tag uint64)    { s.settle(80, tag) } // basic.ack, multiple=false
func (s *rawSubscriber) reject(tag uint64) { s.settle(90, tag) } // basic.reject, requeue=false

// settle appends a basic.ack or basic.reject of tag with its bit clear,
// encoded by hand: the two share one layout.
func (s *rawSubscriber) settle(methodID uint16, tag uint64) {
	var f [8 + 13]byte
	f[0] = amqp.FrameMethod
	binary.BigEndian.PutUint16(f[1:], 1)  // channel
	binary.BigEndian.PutUint32(f[3:], 13) // payload size
	binary.BigEndian.PutUint16(f[7:], 60) // basic
	binary.BigEndian.PutUint16(f[9:], methodID)
	binary.BigEndian.PutUint64(f[11:], tag)
	f[19] = 0 // multiple / requeue
	f[20] = amqp.FrameEnd
	s.c.w.Write(f[:])
}

// close stops the subscriber: a next under way (or the next one) returns
// an error once it has written the acks it holds.
func (s *rawSubscriber) close() { s.c.nc.SetReadDeadline(time.Unix(1, 0)) }

func (p *rawPublisher) close() error { return p.c.close() }
