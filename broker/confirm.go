package broker

import (
	"sync"

	"github.com/brokerd/brokerd/amqp"
)

// confirmTracker sends publisher confirms. Publishes are numbered from 1 in
// the order they arrive; a confirm may complete out of order (a message
// routed nowhere is confirmed at once, one waiting for the store later), so
// each is sent on its own, never with multiple=true: a multiple ack could
// cover a publish that was nacked, or is still waiting for the store.
type confirmTracker struct {
	mu     sync.Mutex
	out    amqp.ChannelOut
	closed bool
}

func (t *confirmTracker) start(out amqp.ChannelOut) {
	t.mu.Lock()
	t.out = out
	t.mu.Unlock()
}

// done confirms publish number seq: basic.ack if ack, else basic.nack.
func (t *confirmTracker) done(seq uint64, ack bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.out == nil {
		return
	}
	if ack {
		t.out.Send(&amqp.BasicAck{DeliveryTag: seq})
	} else {
		t.out.Send(&amqp.BasicNack{DeliveryTag: seq})
	}
}

func (t *confirmTracker) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}
