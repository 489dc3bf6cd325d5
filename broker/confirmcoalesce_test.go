// Tests of confirm coalescing: one multiple ack per channel and group commit, in order, on the wire.

package broker_test

import (
	"fmt"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/store"
)

// Publisher confirms under group commit: one basic.ack{multiple} per
// channel per group, nacks in their place, every tag confirmed once.

// ccRoundTrip checks that nothing is waiting on channel ch: a passive
// declare of q is answered by the next frame of the connection, which
// w.method would fail on if it came from another channel or were a
// confirm.
func ccRoundTrip(w *dvWire, ch uint16, q string) {
	w.t.Helper()
	w.send(ch, &amqp.QueueDeclare{Queue: q, Passive: true})
	dvExpectMethod[*amqp.QueueDeclareOk](w, ch)
}

// ccConfirmFrame reads the next frame, which must be a confirm, and
// returns its channel.
func ccConfirmFrame(w *dvWire) (uint16, amqp.Method) {
	w.t.Helper()
	f := w.frame()
	if f.Type != amqp.FrameMethod {
		w.t.Fatalf("frame type %d on channel %d, want a confirm", f.Type, f.Channel)
	}
	m, err := amqp.DecodeMethod(f.Payload)
	if err != nil {
		w.t.Fatal(err)
	}
	switch m.(type) {
	case *amqp.BasicAck, *amqp.BasicNack:
		return f.Channel, m
	}
	w.t.Fatalf("got %s (%+v) on channel %d, want a confirm", m.Name(), m, f.Channel)
	return 0, nil
}

// TestConfirmGroupCommitOneAckPerChannel: publishes of two channels whose
// store writes complete in one group commit are confirmed with exactly one
// basic.ack{multiple=true} per channel, covering all of them.
func TestConfirmGroupCommitOneAckPerChannel(t *testing.T) {
	const n = 40
	h := newHeldStore()
	b := brokertest.Start(t, brokertest.Config{WrapStore: h.wrap})
	w := dvDialWire(t, b.Addr, 0)
	w.send(2, &amqp.ChannelOpen{})
	dvExpectMethod[*amqp.ChannelOpenOk](w, 2)
	txDeclareDurable(w, 1, "q", nil)
	for _, ch := range []uint16{1, 2} {
		w.send(ch, &amqp.ConfirmSelect{})
		dvExpectMethod[*amqp.ConfirmSelectOk](w, ch)
	}
	props := dvEncodeProps(t, persistentProps)
	h.start(t)
	for i := range n {
		for _, ch := range []uint16{1, 2} {
			w.publish(ch, &amqp.BasicPublish{RoutingKey: "q"}, props, fmt.Appendf(nil, "%d/%d", ch, i))
		}
	}
	h.waitHeld(t, 2*n)
	ccRoundTrip(w, 1, "q") // no confirm before the fsync
	ccRoundTrip(w, 2, "q")

	h.release()
	got := map[uint16]amqp.Method{}
	for range 2 {
		ch, m := ccConfirmFrame(w)
		if got[ch] != nil {
			t.Fatalf("channel %d: second confirm %+v after %+v", ch, m, got[ch])
		}
		got[ch] = m
		if ack, ok := m.(*amqp.BasicAck); !ok || ack.DeliveryTag != n || !ack.Multiple {
			t.Fatalf("channel %d: %s %+v, want basic.ack{delivery-tag=%d, multiple=true}", ch, m.Name(), m, n)
		}
	}
	ccRoundTrip(w, 1, "q") // and nothing after it
	ccRoundTrip(w, 2, "q")
}

// TestConfirmImmediateWaitsBehindStore: publishes confirmed at once
// (unroutable) behind one that waits for the store are confirmed with it,
// in order, in one frame; more of them than the ring's initial size.
func TestConfirmImmediateWaitsBehindStore(t *testing.T) {
	const n = 200
	h := newHeldStore()
	b := brokertest.Start(t, brokertest.Config{WrapStore: h.wrap})
	w := dvDialWire(t, b.Addr, 0)
	txDeclareDurable(w, 1, "q", nil)
	w.send(1, &amqp.ConfirmSelect{})
	dvExpectMethod[*amqp.ConfirmSelectOk](w, 1)
	props := dvEncodeProps(t, persistentProps)
	h.start(t)
	w.publish(1, &amqp.BasicPublish{RoutingKey: "q"}, props, []byte("durable"))
	for range n - 1 {
		w.publish(1, &amqp.BasicPublish{RoutingKey: "nowhere"}, props, []byte("lost"))
	}
	h.waitHeld(t, 1)
	ccRoundTrip(w, 1, "q")
	h.release()
	if _, m := ccConfirmFrame(w); !isAck(m, n, true) {
		t.Fatalf("%s %+v, want basic.ack{delivery-tag=%d, multiple=true}", m.Name(), m, n)
	}
	ccRoundTrip(w, 1, "q")
}

func isAck(m amqp.Method, tag uint64, multiple bool) bool {
	a, ok := m.(*amqp.BasicAck)
	return ok && a.DeliveryTag == tag && a.Multiple == multiple
}

// ccMixed is a run of publishes whose confirms interleave: durable ones
// the store holds, nacks from a full reject-publish queue and an
// unroutable one, both complete at once.
var ccMixed = []struct {
	key  string
	ack  bool
	held bool
}{
	{"free", true, true},
	{"lim", true, true},
	{"lim", true, true},
	{"lim", false, false}, // full: nacked at once
	{"nowhere", true, false},
	{"free", true, true},
	{"lim", false, false},
	{"free", true, true},
}

func ccMixedHeld() (n int) {
	for _, p := range ccMixed {
		if p.held {
			n++
		}
	}
	return n
}

var ccLimArgs = amqp.Table{{Key: "x-max-length", Value: int32(2)}, {Key: "x-overflow", Value: "reject-publish"}}

// TestConfirmNacksSplitMultipleAcks checks the frames on the wire: acks up
// to just before a nack, the nack, then on; no multiple ack covers a
// nacked or pending publish.
func TestConfirmNacksSplitMultipleAcks(t *testing.T) {
	h := newHeldStore()
	b := brokertest.Start(t, brokertest.Config{WrapStore: h.wrap})
	w := dvDialWire(t, b.Addr, 0)
	txDeclareDurable(w, 1, "free", nil)
	txDeclareDurable(w, 1, "lim", ccLimArgs)
	w.send(1, &amqp.ConfirmSelect{})
	dvExpectMethod[*amqp.ConfirmSelectOk](w, 1)
	props := dvEncodeProps(t, persistentProps)
	h.start(t)
	for i, p := range ccMixed {
		w.publish(1, &amqp.BasicPublish{RoutingKey: p.key}, props, fmt.Appendf(nil, "%d", i+1))
	}
	h.waitHeld(t, ccMixedHeld())
	ccRoundTrip(w, 1, "free") // tag 1 waits for the store, so nothing is confirmed
	h.release()
	want := []string{"ack 3 multiple", "nack 4", "ack 6 multiple", "nack 7", "ack 8"}
	for _, wf := range want {
		_, m := ccConfirmFrame(w)
		var got string
		switch m := m.(type) {
		case *amqp.BasicAck:
			got = fmt.Sprintf("ack %d", m.DeliveryTag)
			if m.Multiple {
				got += " multiple"
			}
		case *amqp.BasicNack:
			got = fmt.Sprintf("nack %d", m.DeliveryTag)
			if m.Multiple {
				got += " multiple"
			}
		}
		if got != wf {
			t.Fatalf("confirm %q, want %q (all: %q)", got, wf, want)
		}
	}
	ccRoundTrip(w, 1, "free")
}

// TestConfirmEveryTagOnceThroughClient: through amqp091 (which expands
// multiple acks), every publish of the mixed run is confirmed exactly
// once, in order, ack or nack as it should be: over a store with group
// commit, and over one whose completions the broker cannot group.
func TestConfirmEveryTagOnceThroughClient(t *testing.T) {
	for _, grouped := range []bool{true, false} {
		t.Run(fmt.Sprintf("grouped=%t", grouped), func(t *testing.T) {
			h := newHeldStore()
			wrap := h.wrap
			if !grouped {
				wrap = func(s store.Store) store.Store { return ungrouped{h.wrap(s)} }
			}
			b := brokertest.Start(t, brokertest.Config{WrapStore: wrap})
			ch := b.Session(t, brokertest.NoConfirm)
			limArgs := amqp091.Table{"x-max-length": int32(2), "x-overflow": "reject-publish"}
			for q, args := range map[string]amqp091.Table{"free": nil, "lim": limArgs} {
				if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
					t.Fatal(err)
				}
			}
			confirms := dvConfirmChannel(t, ch, len(ccMixed)+1)
			h.start(t)
			for i, p := range ccMixed {
				ch.Publish("", p.key, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: fmt.Appendf(nil, "%d", i+1)})
			}
			h.waitHeld(t, ccMixedHeld())
			ch.Ready("free") // a round trip: confirms sent so far have reached confirms
			select {
			case c := <-confirms:
				t.Fatalf("confirm %+v before the store completed publish 1", c)
			default:
			}
			h.release()
			for i, p := range ccMixed {
				c := dvConfirm(t, confirms)
				if c.DeliveryTag != uint64(i+1) || c.Ack != p.ack {
					t.Fatalf("confirm %+v, want tag %d ack=%t", c, i+1, p.ack)
				}
			}
			ch.Ready("free")
			select {
			case c := <-confirms:
				t.Fatalf("extra confirm %+v", c)
			default:
			}
		})
	}
}
