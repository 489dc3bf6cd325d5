package amqp

import (
	"errors"
	"sync/atomic"
)

// serverChannel is one open channel of a ServerConn: content assembly and
// the channel.close handshake. It implements ChannelOut for the handler.
// All fields but dead are used by the connection's reader goroutine only.
type serverChannel struct {
	c  *ServerConn
	id uint16
	h  ChannelHandler

	// dead is set (under c.wmu) once the channel is closed: the handler's
	// late sends are dropped instead of reaching a reopened channel of
	// the same number.
	dead     bool
	released bool
	closing  bool // channel.close sent, waiting for close-ok
	// closedByServer is set (under c.wmu, with dead) by Close: the reader
	// finishes the close at the channel's next frame.
	closedByServer atomic.Bool

	// content assembly of a basic.publish
	pub      *BasicPublish
	props    Properties
	raw      []byte
	body     []byte
	bodySize uint64
	reserved uint64 // of the server's unfinished-content budget (reserveBody)
	inHeader bool   // expecting the content header
	inBody   bool   // expecting body frames
}

// Send implements ChannelOut.
func (ch *serverChannel) Send(m Method) { ch.c.sendOn(ch, m) }

// SendContent implements ChannelOut.
func (ch *serverChannel) SendContent(m Method, props, body []byte) {
	ch.c.sendContent(ch, m, props, body)
}

// Later implements ChannelOut.
func (ch *serverChannel) Later(fn func()) { ch.c.later(ch, fn) }

// Writable implements ChannelOut.
func (ch *serverChannel) Writable() bool { return ch.c.writable() }

// Saturated implements ChannelOut.
func (ch *serverChannel) Saturated() bool { return ch.c.saturated() }

// Close implements ChannelOut.
func (ch *serverChannel) Close(e *Error) {
	if ch.sendClose(e) {
		ch.closedByServer.Store(true)
	}
}

// sendClose queues channel.close with e and silences the channel, unless
// it is silent already (closing, or closed by the client); it reports
// whether it did. Any goroutine.
func (ch *serverChannel) sendClose(e *Error) bool {
	c := ch.c
	c.wmu.Lock()
	if c.wclosed || ch.dead {
		c.wmu.Unlock()
		return false
	}
	ch.dead = true
	c.encodeContentLocked()
	c.wbuf = AppendMethodFrame(c.wbuf, ch.id, &ChannelClose{ReplyCode: e.Code, ReplyText: e.Text, FailingClassID: e.ClassID, FailingMethodID: e.MethodID})
	c.wmu.Unlock()
	c.signal()
	return true
}

// release closes the handler once and silences the channel.
func (ch *serverChannel) release() {
	if ch.released {
		return
	}
	ch.released = true
	ch.c.wmu.Lock()
	ch.dead = true
	ch.c.wmu.Unlock()
	ch.dropBody()
	ch.pub, ch.raw = nil, nil
	ch.h.Close()
}

// frame handles one frame for this channel.
func (ch *serverChannel) frame(f Frame) error {
	if !ch.closing && ch.closedByServer.Load() {
		// Closed by Close from another goroutine: finish it here.
		ch.release()
		ch.closing = true
		ch.inHeader, ch.inBody = false, false
	}
	if ch.closing {
		return ch.frameWhileClosing(f)
	}
	if ch.inHeader || ch.inBody {
		// A resource alarm stops the connection here, at its next
		// content frame, not once the body is whole.
		if h := ch.c.holder; h != nil {
			h.HoldContent()
		}
		if ch.inHeader {
			return ch.header(f)
		}
		return ch.bodyFrame(f)
	}
	if f.Type != FrameMethod {
		return Errorf(UnexpectedFrame, "expected method frame, got non method frame instead")
	}
	m, err := DecodeMethod(f.Payload)
	if err != nil {
		return err
	}
	switch m := m.(type) {
	case *ChannelOpen:
		return channelErr(m, Errorf(ChannelError, "second 'channel.open' seen"))
	case *ChannelClose:
		ch.release()
		ch.c.send(ch.id, &ChannelCloseOk{})
		delete(ch.c.channels, ch.id)
		return nil
	case *ChannelCloseOk:
		return nil
	case *BasicPublish:
		ch.pub = m
		ch.inHeader = true
		return nil
	}
	if m.HasContent() {
		return channelErr(m, Errorf(CommandInvalid, "method '%s' is not allowed from a client", m.Name()))
	}
	return ch.result(ch.h.Handle(m))
}

func channelErr(m Method, e *Error) *Error {
	e.ClassID, e.MethodID = m.ClassID(), m.MethodID()
	return e
}

func (ch *serverChannel) header(f Frame) error {
	if f.Type != FrameHeader {
		return Errorf(UnexpectedFrame, "expected content header for class 60, got non content header frame instead")
	}
	classID, size, raw, err := ParseContentHeader(f.Payload)
	if err != nil {
		return err
	}
	if classID != ch.pub.ClassID() {
		return Errorf(UnexpectedFrame, "expected content header for class %d, got one for class %d instead", ch.pub.ClassID(), classID)
	}
	props, err := DecodeProperties(raw)
	if err != nil {
		return err
	}
	ch.inHeader = false
	ch.props = props
	ch.raw = append([]byte(nil), raw...)
	if max := ch.c.srv.cfg.MaxMessageSize; size > max {
		// The body frames still to come are discarded while closing.
		return ch.result(channelErr(ch.pub, Errorf(PreconditionFailed, "message size %d is larger than configured max size %d", size, max)))
	}
	ch.bodySize = size
	if size == 0 {
		return ch.complete()
	}
	if !ch.c.reserveBody(ch, size) {
		return nil // closing: the read loop ends at its next turn
	}
	ch.inBody = true
	return nil
}

// bodyFrame appends a body frame to the body being assembled. The buffer
// grows with what arrives (doubling, never past the declared size, which
// a single-frame body gets at once), so a header announcing a large body
// costs nothing until its bytes come; what the connection's unfinished
// bodies hold is bounded (MaxUnfinishedContent).
func (ch *serverChannel) bodyFrame(f Frame) error {
	if f.Type != FrameBody {
		return Errorf(UnexpectedFrame, "expected content body, got non content body frame instead")
	}
	n := uint64(len(ch.body)) + uint64(len(f.Payload))
	if n > ch.bodySize {
		return Errorf(FrameError, "content body of %d bytes exceeds the declared size %d", n, ch.bodySize)
	}
	if n > uint64(cap(ch.body)) {
		grown := max(2*uint64(cap(ch.body)), n)
		if n < ch.bodySize {
			grown = min(grown, ch.bodySize)
		} else {
			grown = n // complete: no room for more
		}
		c := ch.c
		held := c.unfinished - uint64(cap(ch.body)) + grown
		if limit := c.srv.cfg.MaxUnfinishedContent; n < ch.bodySize && held > limit {
			return Errorf(ResourceError, "unfinished message bodies on this connection would hold %d bytes, over the limit of %d", held, limit)
		}
		b := make([]byte, len(ch.body), grown)
		copy(b, ch.body)
		c.unfinished = held
		ch.body = b
	}
	ch.body = append(ch.body, f.Payload...)
	ch.c.received.Add(uint64(len(f.Payload)))
	if n == ch.bodySize {
		ch.inBody = false
		return ch.complete()
	}
	return nil
}

// dropBody lets go of the body being assembled, if any, and of its
// reservation.
func (ch *serverChannel) dropBody() {
	ch.c.unfinished -= uint64(cap(ch.body))
	ch.body = nil
	ch.c.releaseBody(ch)
}

func (ch *serverChannel) complete() error {
	pub, props, raw, body := ch.pub, ch.props, ch.raw, ch.body
	ch.dropBody()
	ch.pub, ch.props, ch.raw = nil, Properties{}, nil
	if body == nil {
		body = []byte{}
	}
	return ch.result(ch.h.Publish(pub, &props, raw, body))
}

// result turns a handler error into a channel close (soft) or returns it
// to the connection (hard).
func (ch *serverChannel) result(err error) error {
	if err == nil {
		return nil
	}
	var ae *Error
	if !errors.As(err, &ae) {
		return Errorf(InternalError, "%s", err)
	}
	if ae.Hard() {
		return ae
	}
	ch.sendClose(ae) // unless Close sent one already
	ch.release()
	ch.closing = true
	ch.inHeader, ch.inBody = false, false
	return nil
}

// frameWhileClosing discards everything until the client's close-ok (or
// its own channel.close crossing ours).
func (ch *serverChannel) frameWhileClosing(f Frame) error {
	if f.Type != FrameMethod {
		return nil
	}
	m, err := DecodeMethod(f.Payload)
	if err != nil {
		return nil
	}
	switch m.(type) {
	case *ChannelCloseOk:
		delete(ch.c.channels, ch.id)
	case *ChannelClose:
		// Closes crossed: answer, but the client still owes the
		// close-ok for ours (RabbitMQ keeps the channel closing too).
		ch.c.send(ch.id, &ChannelCloseOk{})
	}
	return nil
}
