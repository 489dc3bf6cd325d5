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
// client. It does what the benchmark needs and nothing more: a publisher
// uses channel 1, a subscriber as many channels as it has queues (up to
// the broker's channel_max, then several consumers a channel); heartbeats
// only on the idle connections of idle-conns (see scale.go); no returns.

// rawConn is one connection with channel 1 open.
type rawConn struct {
	nc         net.Conn
	w          *bufio.Writer
	fr         *amqp.FrameReader
	frameMax   uint32
	channelMax uint16 // negotiated; at least 1
	heartbeat  uint16 // negotiated, seconds
	buf        []byte // scratch for encoding
}

// rawConfig tunes a raw connection; the zero value is the load
// generator's: one channel, no heartbeats, a 256 KiB write buffer.
type rawConfig struct {
	// channelMax is the number of channels the client wants (the
	// broker's limit wins if lower); 0 means 1.
	channelMax uint16
	// heartbeat is the interval in seconds the client asks for; the
	// broker's proposal wins if lower and not 0 (as in RabbitMQ's
	// clients). 0 asks for none.
	heartbeat uint16
	// writeBuffer is the write buffer's size; 0 means 256 KiB.
	writeBuffer int
}

// rawDial connects to rawURL (amqp://user:pass@host:port/vhost), logs in
// with PLAIN and opens channel 1.
func rawDial(rawURL string, cfg rawConfig) (*rawConn, error) {
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
	if cfg.writeBuffer == 0 {
		cfg.writeBuffer = 256 << 10
	}
	c := &rawConn{nc: nc, w: bufio.NewWriterSize(nc, cfg.writeBuffer), fr: amqp.NewFrameReader(nc)}
	if err := c.handshake(user, pass, vhost, cfg); err != nil {
		nc.Close()
		return nil, fmt.Errorf("raw client: %w", err)
	}
	return c, nil
}

func (c *rawConn) handshake(user, pass, vhost string, cfg rawConfig) error {
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
	c.channelMax = max(cfg.channelMax, 1)
	if tune.ChannelMax != 0 {
		c.channelMax = min(c.channelMax, tune.ChannelMax)
	}
	c.heartbeat = cfg.heartbeat
	if tune.Heartbeat != 0 && cfg.heartbeat != 0 {
		c.heartbeat = min(c.heartbeat, tune.Heartbeat)
	}
	c.send(0, &amqp.ConnectionTuneOk{ChannelMax: c.channelMax, FrameMax: c.frameMax, Heartbeat: c.heartbeat})
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
	persistent bool
	methods    [][]byte // basic.publish frames, one per routing key
	props      []byte
	expiration string
	hadHeader  bool // props carry the last message's header
	// confirms that arrived but were not taken yet: acks then nacks
	// are counted per tag run, in order.
	confirming bool
	nextTag    uint64 // tag of the next publish
	doneTag    uint64 // every tag up to it is confirmed
	pending    []bool // confirms arrived, oldest first, not yet taken
}

func newRawPublisher(c *rawConn, exchange string, keys []string, persistent, confirm bool) (*rawPublisher, error) {
	p := &rawPublisher{c: c, persistent: persistent, nextTag: 1}
	for _, key := range keys {
		p.methods = append(p.methods, amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{Exchange: exchange, RoutingKey: key}))
	}
	p.setProps(pubExtra{})
	if confirm {
		if _, err := c.call(1, &amqp.ConfirmSelect{}); err != nil {
			return nil, fmt.Errorf("confirm.select: %w", err)
		}
		p.confirming = true
	}
	return p, nil
}

// setProps encodes the properties of the next publishes, with x's
// expiration and header.
func (p *rawPublisher) setProps(x pubExtra) {
	props := amqp.Properties{Flags: amqp.FlagDeliveryMode, DeliveryMode: 1}
	if p.persistent {
		props.DeliveryMode = 2
	}
	if x.expiration != "" {
		props.Flags |= amqp.FlagExpiration
		props.Expiration = x.expiration
	}
	if x.header != "" {
		props.Flags |= amqp.FlagHeaders
		props.Headers = amqp.Table{{Key: x.header, Value: x.headerValue}}
	}
	p.props, _ = props.Append(p.props[:0])
	p.expiration = x.expiration
}

// publish appends one message to the write buffer.
func (p *rawPublisher) publish(key int, body []byte, x pubExtra) error {
	if x.expiration != p.expiration || x.header != "" || p.hadHeader {
		p.setProps(x) // per message only with a header or a new expiration
		p.hadHeader = x.header != ""
	}
	c := p.c
	c.w.Write(p.methods[key])
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

// rawSubscriber is the consuming side of a raw connection: one consumer
// per queue, on channels 1..n. The tags it hands out carry the channel
// in their top 16 bits (tagShift), so ack and reject know where to go.
type rawSubscriber struct {
	c     *rawConn
	chans []rawDelivery // indexed by channel number: the delivery being assembled
}

// tagShift places the channel number above a delivery tag in the tags a
// rawSubscriber returns.
const tagShift = 48

// rawDelivery is a delivery being assembled on one channel (frames of
// several channels may interleave).
type rawDelivery struct {
	tag  uint64
	size uint64
	have bool   // the content header arrived
	body []byte // reused
}

// newRawSubscriber consumes each of queues, one consumer per queue, on as
// many channels as the connection allows (channel 1 is open already).
func newRawSubscriber(c *rawConn, queues []string, prefetch int, noAck bool) (*rawSubscriber, error) {
	n := min(len(queues), int(c.channelMax))
	for ch := uint16(1); int(ch) <= n; ch++ {
		if ch > 1 {
			if _, err := c.call(ch, &amqp.ChannelOpen{}); err != nil {
				return nil, fmt.Errorf("open channel %d: %w", ch, err)
			}
		}
		if !noAck {
			if _, err := c.call(ch, &amqp.BasicQos{PrefetchCount: uint16(min(prefetch, 65535))}); err != nil {
				return nil, fmt.Errorf("qos: %w", err)
			}
		}
	}
	for i, queue := range queues {
		ch := uint16(1 + i%n)
		if _, err := c.call(ch, &amqp.BasicConsume{Queue: queue, NoAck: noAck}); err != nil {
			return nil, fmt.Errorf("consume %s: %w", queue, err)
		}
	}
	return &rawSubscriber{c: c, chans: make([]rawDelivery, n+1)}, nil
}

// next returns the next delivery's tag and body (valid until the next
// call). Acks written since the last read go out first when nothing more
// is buffered to read: one write per burst.
func (s *rawSubscriber) next() (uint64, []byte, error) {
	c := s.c
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
		if f.Type == amqp.FrameHeartbeat {
			continue
		}
		if f.Channel == 0 || int(f.Channel) >= len(s.chans) {
			if f.Type == amqp.FrameMethod {
				if m, err := amqp.DecodeMethod(f.Payload); err == nil {
					if err := closeError(m); err != nil {
						return 0, nil, err
					}
				}
			}
			return 0, nil, fmt.Errorf("frame type %d on channel %d while consuming", f.Type, f.Channel)
		}
		d := &s.chans[f.Channel]
		switch f.Type {
		case amqp.FrameMethod:
			m, err := amqp.DecodeMethod(f.Payload)
			if err != nil {
				return 0, nil, err
			}
			if err := closeError(m); err != nil {
				return 0, nil, err
			}
			dm, ok := m.(*amqp.BasicDeliver)
			if !ok {
				return 0, nil, fmt.Errorf("got %s while consuming", m.Name())
			}
			d.tag, d.have, d.body = dm.DeliveryTag|uint64(f.Channel)<<tagShift, false, d.body[:0]
		case amqp.FrameHeader:
			_, d.size, _, err = amqp.ParseContentHeader(f.Payload)
			if err != nil {
				return 0, nil, err
			}
			d.have = true
			if d.size == 0 {
				return d.tag, d.body, nil
			}
		case amqp.FrameBody:
			if !d.have {
				return 0, nil, errors.New("body frame without a content header")
			}
			d.body = append(d.body, f.Payload...)
			if uint64(len(d.body)) >= d.size {
				return d.tag, d.body, nil
			}
		}
	}
}

func (s *rawSubscriber) ack(tag uint64)    { s.settle(80, tag) } // basic.ack, multiple=false
func (s *rawSubscriber) reject(tag uint64) { s.settle(90, tag) } // basic.reject, requeue=false

// settle appends a basic.ack or basic.reject of tag (channel above
// tagShift) with its bit clear, encoded by hand: the two share one layout.
func (s *rawSubscriber) settle(methodID uint16, tag uint64) {
	var f [8 + 13]byte
	f[0] = amqp.FrameMethod
	binary.BigEndian.PutUint16(f[1:], uint16(tag>>tagShift)) // channel
	binary.BigEndian.PutUint32(f[3:], 13)                    // payload size
	binary.BigEndian.PutUint16(f[7:], 60)                    // basic
	binary.BigEndian.PutUint16(f[9:], methodID)
	binary.BigEndian.PutUint64(f[11:], tag&(1<<tagShift-1))
	f[19] = 0 // multiple / requeue
	f[20] = amqp.FrameEnd
	s.c.w.Write(f[:])
}

// close stops the subscriber: a next under way (or the next one) returns
// an error once it has written the acks it holds.
func (s *rawSubscriber) close() { s.c.nc.SetReadDeadline(time.Unix(1, 0)) }

func (p *rawPublisher) close() error { return p.c.close() }
