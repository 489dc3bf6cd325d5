package broker

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/queue"
)

// conn is the broker side of one AMQP connection (an amqp.Session).
//
// Concurrency: mu guards channels and exclusive, and unsettled is the
// reader goroutine's; the other fields are set when the connection opens
// and not changed after, but user and perm, atomics that change under
// Broker.mu.
type conn struct {
	// ctx ends when the connection closes: a publisher waiting for the
	// store's room (Store.Reserve) stops waiting.
	ctx    context.Context
	cancel context.CancelFunc

	b        *Broker
	ac       *amqp.ServerConn
	vhost    *VHost
	userName string
	// internal: opened by OpenInternalConnection, with every permission
	// in its vhost whatever users and permissions say (userName names no
	// user: changes to a user of that name leave it alone).
	internal bool
	// user is the user's current record and perm its permissions in the
	// vhost (nil: none): a change applies to open connections at once
	// (Broker.refreshConnPermsLocked).
	user atomic.Pointer[auth.User]
	perm atomic.Pointer[auth.Permission]
	// topic is the user's topic permissions in the vhost (nil: none),
	// changed as perm is; nchannels counts the open channels of a
	// network connection, for its user's max-channels (tenancy.go).
	topic        atomic.Pointer[topicPerms]
	nchannels    atomic.Int64
	cancelNotify bool
	// done is closed when Closed has run: the connection does nothing
	// more (DeleteVHost waits for it).
	done   chan struct{}
	opened time.Time

	// mu guards channels and exclusive. A leaf: nothing is taken under
	// it (callers copy what they need and release it first). Taken with
	// no lock held, or under Broker.authMu (a vhost's deletion deletes a
	// Direct's exclusive queue).
	mu        sync.Mutex
	channels  map[uint16]*channel // mu
	exclusive []*queue.Queue      // mu

	// bursts: the connection is a socket whose reader calls EndBurst, so
	// its channels put off settling acks until the burst ends. unsettled
	// lists the channels with acks put off; reader goroutine only.
	bursts    bool
	unsettled []*channel

	// permitTransient: the connection, a Direct, may declare queues
	// neither durable nor exclusive whatever
	// Options.DenyTransientNonExclQueues says (Direct.PermitTransientQueues).
	// Set before its first method.
	permitTransient bool
}

// EndBurst implements amqp.BurstEnder: the acks, nacks and rejects the
// burst of frames just read are settled, one lock hold and one store
// operation per queue and channel instead of one per method.
func (c *conn) EndBurst() { c.settleHeld() }

// settleHeld settles the acks, nacks and rejects every channel of the
// connection put off. A method whose effect must come after them — any
// but another ack, nack or reject, and every publish — calls it first,
// whatever its channel: a publish applied before an ack the client sent
// earlier could be confirmed, and a crash then bring the acked message
// back. Reader goroutine only; nothing to do unless the connection's
// socket reader puts acks off (bursts).
func (c *conn) settleHeld() {
	if len(c.unsettled) == 0 {
		return
	}
	for _, ch := range c.unsettled {
		ch.flushSettles()
	}
	clear(c.unsettled)
	c.unsettled = c.unsettled[:0]
}

// OpenChannel implements amqp.Session.
func (c *conn) OpenChannel(id uint16, out amqp.ChannelOut) (amqp.ChannelHandler, *amqp.Error) {
	if err := c.admitChannel(); err != nil {
		return nil, err
	}
	ch := newChannel(c, id, out)
	c.mu.Lock()
	c.channels[id] = ch
	c.mu.Unlock()
	return ch, nil
}

func (c *conn) dropChannel(ch *channel) {
	c.mu.Lock()
	if c.channels[ch.id] == ch {
		delete(c.channels, ch.id)
		if c.ac != nil { // a network connection's, counted by admitChannel
			c.nchannels.Add(-1)
		}
	}
	c.mu.Unlock()
}

// Drained implements amqp.Session: the outbound queue has room again, so
// consumers that were skipped may receive.
func (c *conn) Drained() {
	c.mu.Lock()
	chs := make([]*channel, 0, len(c.channels))
	for _, ch := range c.channels {
		chs = append(chs, ch)
	}
	c.mu.Unlock()
	for _, ch := range chs {
		ch.kick()
	}
}

// Closed implements amqp.Session: the connection is gone. Its channels
// have been closed; its exclusive queues are deleted.
func (c *conn) Closed() {
	c.cancel()
	c.mu.Lock()
	chs := make([]*channel, 0, len(c.channels))
	for _, ch := range c.channels {
		chs = append(chs, ch)
	}
	qs := append([]*queue.Queue(nil), c.exclusive...)
	c.mu.Unlock()
	for _, ch := range chs {
		ch.Close()
	}
	for _, q := range qs {
		c.b.deleteQueue(q)
	}
	c.b.dropConn(c)
	if c.done != nil {
		close(c.done)
	}
}

func (c *conn) addExclusive(q *queue.Queue) {
	c.mu.Lock()
	c.exclusive = append(c.exclusive, q)
	c.mu.Unlock()
}

func (c *conn) removeExclusive(q *queue.Queue) {
	c.mu.Lock()
	if i := slices.Index(c.exclusive, q); i >= 0 {
		// A new slice: a copy taken under the lock is iterated after it.
		c.exclusive = slices.Concat(c.exclusive[:i], c.exclusive[i+1:])
	}
	c.mu.Unlock()
}

// lookupQueue finds a queue of the connection's vhost that this
// connection may use.
func (c *conn) lookupQueue(name string) (*queue.Queue, *amqp.Error) {
	v := c.vhost
	v.mu.RLock()
	q := v.topo.Queues[name]
	v.mu.RUnlock()
	if q == nil {
		return nil, queue.NoQueueError(v.Name, name)
	}
	if q.Exclusive && q.Owner != c {
		return nil, errLocked(v.Name, name)
	}
	return q, nil
}
