// Tests of connection.tune: frame-max, channel-max and the maximum message size.

package broker_test

// Tests of connection.tune: frame-max and channel-max negotiated and
// enforced, tune values the server refuses, and the maximum message size.

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
)

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
