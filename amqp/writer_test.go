package amqp

import (
	"bytes"
	"net"
	"strconv"
	"testing"
)

// loopConn is a ServerConn with the given frame_max on one end of a
// loopback TCP connection, its writer running; the other end is returned.
// The test's cleanup stops the writer and closes both ends.
func loopConn(t testing.TB, frameMax uint32) (*ServerConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := ln.Accept()
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	c := newServerConn(NewServer(ServerConfig{}), nc)
	c.frameMax = frameMax
	go c.writer()
	t.Cleanup(func() {
		c.closeOnce.Do(func() { close(c.quit) })
		<-c.wdone
		nc.Close()
		client.Close()
	})
	return c, client
}

// TestContentFramesKeepTheirPlace: content frames, encoded by the writer
// or by the next sender of another frame, leave in the order everything
// was queued, whoever sends next: deliveries (one split over frames, one
// given a method the caller then reuses) before the method frame sent
// after them, before a channel.close, and a return after that on another
// channel.
func TestContentFramesKeepTheirPlace(t *testing.T) {
	c, client := loopConn(t, 4096)
	fr := NewFrameReader(client)
	fr.SetMaxFrameSize(0)
	ch1, ch2 := &serverChannel{c: c, id: 1}, &serverChannel{c: c, id: 2}
	big := bytes.Repeat([]byte("b"), 10000) // three body frames at frame_max 4096
	props, err := (&Properties{}).Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &BasicDeliver{ConsumerTag: "c", DeliveryTag: 1, RoutingKey: "q"}
	c.sendContent(ch1, d, props, big)
	d.DeliveryTag = 2 // the caller's method, reused
	c.sendContent(ch1, d, props, []byte("small"))
	c.sendOn(ch1, &BasicQosOk{})
	c.sendContent(ch2, &BasicReturn{ReplyCode: NoRoute, RoutingKey: "nowhere"}, props, []byte("ret"))
	ch1.sendClose(Errorf(PreconditionFailed, "test"))
	c.sendContent(ch1, d, props, []byte("after the close")) // a dead channel: dropped
	c.sendOn(ch2, &BasicAck{DeliveryTag: 7})

	want := []string{
		"1 basic.deliver tag=1", "1 header 10000", "1 body", "1 body", "1 body",
		"1 basic.deliver tag=2", "1 header 5", "1 body",
		"1 basic.qos-ok",
		"2 basic.return", "2 header 3", "2 body",
		"1 channel.close",
		"2 basic.ack tag=7",
	}
	for i, w := range want {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		var got string
		switch f.Type {
		case FrameMethod:
			m, err := DecodeMethod(f.Payload)
			if err != nil {
				t.Fatal(err)
			}
			got = m.Name()
			switch m := m.(type) {
			case *BasicDeliver:
				got += " tag=" + strconv.FormatUint(m.DeliveryTag, 10)
			case *BasicAck:
				got += " tag=" + strconv.FormatUint(m.DeliveryTag, 10)
			}
		case FrameHeader:
			_, size, _, err := ParseContentHeader(f.Payload)
			if err != nil {
				t.Fatal(err)
			}
			got = "header " + strconv.FormatUint(size, 10)
		case FrameBody:
			got = "body"
		}
		if got = strconv.Itoa(int(f.Channel)) + " " + got; got != w {
			t.Fatalf("frame %d is %q, want %q (all: %q)", i, got, w, want)
		}
	}
}

// TestQueuedContentCounts: content frames not yet encoded count toward
// the outbound queue's size, so dispatch stops at the high-water mark and
// a reader waits at the hard limit as before.
func TestQueuedContentCounts(t *testing.T) {
	srv, client := net.Pipe() // nobody reads client: the writer blocks in its first write
	c := newServerConn(NewServer(ServerConfig{}), srv)
	c.frameMax = 131072
	go c.writer()
	t.Cleanup(func() {
		c.closeOnce.Do(func() { close(c.quit) })
		client.Close()
		srv.Close()
		<-c.wdone
	})
	ch := &serverChannel{c: c, id: 1}
	body := make([]byte, 64<<10)
	for c.writable() {
		c.sendContent(ch, &BasicDeliver{ConsumerTag: "c"}, nil, body)
	}
	c.wmu.Lock()
	n := len(c.wcontent)
	c.wmu.Unlock()
	if n < writeHighWater/len(body) {
		t.Fatalf("not writable after %d deliveries of 64 KiB, below the high-water mark", n)
	}
	for !c.wfull.Load() {
		c.sendContent(ch, &BasicDeliver{ConsumerTag: "c"}, nil, body)
	}
	if !c.saturated() {
		t.Fatal("the hard limit was flagged but saturated says no")
	}
}
