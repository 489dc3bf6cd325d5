package broker

import (
	"sync"

	"github.com/brokerd/brokerd/amqp"
)

// confirmTracker sends publisher confirms. Publishes are numbered from 1 in
// the order they arrive; a confirm may complete out of order (a message
// routed nowhere is confirmed at once, one waiting for the store later).
// Acks that complete in order are coalesced with multiple=true; nacks are
// always sent one by one.
type confirmTracker struct {
	mu     sync.Mutex
	out    amqp.ChannelOut
	lowest uint64          // smallest publish number not yet confirmed
	early  map[uint64]bool // confirmed out of order, above lowest
	closed bool
}

func (t *confirmTracker) start(out amqp.ChannelOut) {
	t.mu.Lock()
	t.out, t.lowest = out, 1
	t.mu.Unlock()
}

// done confirms publish number seq.
func (t *confirmTracker) done(seq uint64, ack bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.out == nil {
		return
	}
	if !ack {
		t.out.Send(&amqp.BasicNack{DeliveryTag: seq})
	}
	if seq != t.lowest {
		if t.early == nil {
			t.early = make(map[uint64]bool)
		}
		t.early[seq] = true
		if ack {
			t.out.Send(&amqp.BasicAck{DeliveryTag: seq})
		}
		return
	}
	t.lowest++
	for t.early[t.lowest] {
		delete(t.early, t.lowest)
		t.lowest++
	}
	if ack {
		t.out.Send(&amqp.BasicAck{DeliveryTag: t.lowest - 1, Multiple: t.lowest-1 > seq})
	}
}

func (t *confirmTracker) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}
