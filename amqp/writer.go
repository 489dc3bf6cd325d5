package amqp

import (
	"time"
)

// writeTimeout bounds one socket write: a client that reads nothing for
// this long is dropped rather than allowed to pin the server's memory.
const writeTimeout = 30 * time.Second

// maxSpare is the largest buffer the writer keeps for reuse, so a
// connection streaming deliveries swaps two buffers instead of growing a
// new one from nothing after every write (the growth's copies took an
// eighth of the broker's CPU at 250k msgs/s). Twice the high-water mark: a
// queue that reached the mark holds a little more than it, in a buffer
// that append grew past it (by a quarter), and a bound of the mark itself
// threw exactly those away — a consumer kept at the mark by a faster
// publisher regrew its 4 MiB from nothing on every write
// (BenchmarkDeliverStream: 2.2 µs and 3 KB allocated per delivery, now
// 0.57 µs and 22 B). An idle connection's buffers stay as small as what
// it sent.
const maxSpare = 2 * writeHighWater

func (c *ServerConn) signal() {
	select {
	case c.wsignal <- struct{}{}:
	default:
	}
}

// send queues a method frame.
func (c *ServerConn) send(ch uint16, m Method) {
	c.wmu.Lock()
	if !c.wclosed {
		c.encodeContentLocked()
		c.wbuf = AppendMethodFrame(c.wbuf, ch, m)
		c.noteQueuedLocked()
	}
	c.wmu.Unlock()
	c.signal()
}

// sendRaw queues already encoded frames.
func (c *ServerConn) sendRaw(b []byte) {
	c.wmu.Lock()
	if !c.wclosed {
		c.encodeContentLocked()
		c.wbuf = append(c.wbuf, b...)
		c.noteQueuedLocked()
	}
	c.wmu.Unlock()
	c.signal()
}

// sendContent queues a content method with its header and body frames.
// It does nothing if the channel is dead (closed, maybe reopened by the
// client under the same number). The frames are encoded by the writer
// (or by the next sender of another frame, which encodes them first, so
// frames leave in the order they were queued): a queue's dispatch, which
// runs on a publisher's reader goroutine, only records the delivery, and
// the copy of its body into the outbound buffer happens on the consumer's
// connection's writer.
func (c *ServerConn) sendContent(ch *serverChannel, m Method, props, body []byte) {
	c.wmu.Lock()
	if !c.wclosed && !ch.dead {
		p := pendingContent{ch: ch.id, props: props, body: body}
		if d, ok := m.(*BasicDeliver); ok {
			p.deliver = *d // the caller reuses its method
		} else {
			p.m = m
		}
		c.wcontent = append(c.wcontent, p)
		c.wcontentBytes += len(props) + len(body) + contentOverhead
		c.noteQueuedLocked()
	}
	c.wmu.Unlock()
	c.signal()
}

// pendingContent is a content method queued by sendContent: a
// basic.deliver, copied, or another content method (get-ok, return), with
// the properties and body it refers to.
type pendingContent struct {
	ch          uint16
	deliver     BasicDeliver
	m           Method // nil for a basic.deliver
	props, body []byte
}

// contentOverhead approximates the frames of a content method besides its
// properties and body.
const contentOverhead = 96

// appendContent encodes ps after dst, in order.
func (c *ServerConn) appendContent(dst []byte, ps []pendingContent) []byte {
	for i := range ps {
		p := &ps[i]
		m := p.m
		if m == nil {
			m = &p.deliver
		}
		dst = AppendMethodFrame(dst, p.ch, m)
		dst = AppendHeaderFrame(dst, p.ch, m.ClassID(), uint64(len(p.body)), p.props)
		dst = AppendBodyFrames(dst, p.ch, p.body, c.frameMax)
	}
	return dst
}

// encodeContentLocked encodes the queued content frames into wbuf: what a
// sender of any other frame does first.
func (c *ServerConn) encodeContentLocked() {
	if len(c.wcontent) == 0 {
		return
	}
	c.wbuf = c.appendContent(c.wbuf, c.wcontent)
	clear(c.wcontent)
	c.wcontent = c.wcontent[:0]
	c.wcontentBytes = 0
}

// sendOn queues a method frame for a channel unless it is dead.
func (c *ServerConn) sendOn(ch *serverChannel, m Method) {
	c.wmu.Lock()
	if !c.wclosed && !ch.dead {
		c.encodeContentLocked()
		c.wbuf = AppendMethodFrame(c.wbuf, ch.id, m)
		c.noteQueuedLocked()
	}
	c.wmu.Unlock()
	c.signal()
}

// later queues fn for the writer (ChannelOut.Later) unless the channel
// is dead.
func (c *ServerConn) later(ch *serverChannel, fn func()) {
	c.wmu.Lock()
	if !c.wclosed && !ch.dead {
		c.wlater = append(c.wlater, fn)
	}
	c.wmu.Unlock()
	c.signal()
}

// noteQueuedLocked flags a queue that reached writeHardLimit for the
// reader (awaitOutboundRoom), which looks at the flag on every frame.
func (c *ServerConn) noteQueuedLocked() {
	if c.queuedLocked() >= writeHardLimit {
		c.wfull.Store(true)
	}
}

// saturated reports whether the outbound queue holds writeHardLimit.
func (c *ServerConn) saturated() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.queuedLocked() >= writeHardLimit
}

// queuedLocked is the size of the outbound queue: its frames and the
// content frames still to encode.
func (c *ServerConn) queuedLocked() int { return len(c.wbuf) + c.wcontentBytes }

// awaitOutboundRoom parks the reader while the outbound queue holds
// writeHardLimit or more, until the writer takes it (or the connection
// ends): a client that publishes but does not read its confirms or
// returns is not read either. The heartbeat monitor pauses meanwhile: it
// is the server that does not read.
func (c *ServerConn) awaitOutboundRoom() {
	if !c.wfull.Load() {
		return
	}
	c.wmu.Lock()
	if c.queuedLocked() < writeHardLimit || c.wclosed {
		c.wmu.Unlock()
		return
	}
	c.wmu.Unlock()
	c.cmu.Lock()
	c.outPaused = true
	c.armReadDeadlineLocked()
	c.cmu.Unlock()
	for {
		c.wmu.Lock()
		full, taken := c.queuedLocked() >= writeHardLimit && !c.wclosed, c.wtaken
		c.wmu.Unlock()
		if !full {
			break
		}
		select {
		case <-taken:
		case <-c.wdone:
		}
	}
	c.cmu.Lock()
	c.outPaused = false
	c.armReadDeadlineLocked()
	c.cmu.Unlock()
}

func (c *ServerConn) writable() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.queuedLocked() < writeHighWater {
		return true
	}
	c.wblocked = true
	return false
}

// writer flushes the outbound queue whenever signalled, coalescing
// everything queued since the last write into one syscall, and sends a
// heartbeat when nothing else was written for half the interval.
func (c *ServerConn) writer() {
	defer close(c.wdone)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var spare []byte
	var spareLater []func()
	var spareContent []pendingContent
	lastWrite := time.Now()
	for {
		quit := false
		select {
		case <-c.wsignal:
		case <-c.quit:
			quit = true
		case now := <-tick.C:
			if hb := time.Duration(c.hbNanos.Load()); hb > 0 && now.Sub(lastWrite) >= hb/2 {
				c.wmu.Lock()
				c.wbuf = AppendHeartbeat(c.wbuf)
				c.wmu.Unlock()
			}
		}
		c.wmu.Lock()
		if len(c.wlater) > 0 {
			// Run them unlocked: they send, which takes wmu. What they
			// queue goes out in this write, quitting or not (a shutdown
			// flushes the confirms of what the store made durable).
			fns := c.wlater
			c.wlater = spareLater
			c.wmu.Unlock()
			for i, fn := range fns {
				fn()
				fns[i] = nil
			}
			spareLater = fns[:0]
			c.wmu.Lock()
		}
		buf, content := c.wbuf, c.wcontent
		queued := c.queuedLocked()
		c.wbuf, c.wcontent, c.wcontentBytes = spare[:0], spareContent[:0], 0
		if quit {
			c.wclosed = true
			c.wlater = nil
		}
		if queued >= writeHardLimit {
			c.wfull.Store(false)
			close(c.wtaken) // the reader may wait for it (awaitOutboundRoom)
			c.wtaken = make(chan struct{})
		}
		c.wmu.Unlock()
		if len(content) > 0 {
			buf = c.appendContent(buf, content)
			clear(content) // drop the bodies
		}
		spareContent = content[:0]
		if len(buf) > 0 {
			c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
			n, err := c.nc.Write(buf)
			c.sendOct.Add(uint64(n))
			c.sendCnt.Add(1)
			if err != nil {
				c.wmu.Lock()
				c.wclosed = true
				c.wbuf, c.wlater, c.wcontent, c.wcontentBytes = nil, nil, nil, 0
				close(c.wtaken)
				c.wtaken = make(chan struct{})
				c.wmu.Unlock()
				c.nc.Close() // the reader sees the error and ends the connection
				<-c.quit
				return
			}
			lastWrite = time.Now()
		}
		if cap(buf) <= maxSpare {
			spare = buf[:0]
		} else {
			spare = nil
		}
		if quit {
			return
		}
		c.wmu.Lock()
		drained := c.wblocked && c.queuedLocked() < writeLowWater
		if drained {
			c.wblocked = false
		}
		sess := c.session
		c.wmu.Unlock()
		if drained && sess != nil {
			sess.Drained()
		}
	}
}
