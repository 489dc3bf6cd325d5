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
		c.wbuf = append(c.wbuf, b...)
		c.noteQueuedLocked()
	}
	c.wmu.Unlock()
	c.signal()
}

// sendContent queues a content method with its header and body frames.
// It does nothing if the channel is dead (closed, maybe reopened by the
// client under the same number).
func (c *ServerConn) sendContent(ch *serverChannel, m Method, props, body []byte) {
	c.wmu.Lock()
	if !c.wclosed && !ch.dead {
		c.wbuf = AppendMethodFrame(c.wbuf, ch.id, m)
		c.wbuf = AppendHeaderFrame(c.wbuf, ch.id, m.ClassID(), uint64(len(body)), props)
		c.wbuf = AppendBodyFrames(c.wbuf, ch.id, body, c.frameMax)
		c.noteQueuedLocked()
	}
	c.wmu.Unlock()
	c.signal()
}

// sendOn queues a method frame for a channel unless it is dead.
func (c *ServerConn) sendOn(ch *serverChannel, m Method) {
	c.wmu.Lock()
	if !c.wclosed && !ch.dead {
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
	if len(c.wbuf) >= writeHardLimit {
		c.wfull.Store(true)
	}
}

// saturated reports whether the outbound queue holds writeHardLimit.
func (c *ServerConn) saturated() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return len(c.wbuf) >= writeHardLimit
}

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
	if len(c.wbuf) < writeHardLimit || c.wclosed {
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
		full, taken := len(c.wbuf) >= writeHardLimit && !c.wclosed, c.wtaken
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
	if len(c.wbuf) < writeHighWater {
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
		buf := c.wbuf
		c.wbuf = spare[:0]
		if quit {
			c.wclosed = true
			c.wlater = nil
		}
		if len(buf) >= writeHardLimit {
			c.wfull.Store(false)
			close(c.wtaken) // the reader may wait for it (awaitOutboundRoom)
			c.wtaken = make(chan struct{})
		}
		c.wmu.Unlock()
		if len(buf) > 0 {
			c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := c.nc.Write(buf); err != nil {
				c.wmu.Lock()
				c.wclosed = true
				c.wbuf, c.wlater = nil, nil
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
		drained := c.wblocked && len(c.wbuf) < writeLowWater
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
