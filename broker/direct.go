package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/queue"
)

// Direct is an in-process AMQP channel for management operations. Its
// methods run through the code of a client's channel, so they are checked,
// validated and refused exactly as over the wire, with the same texts:
// RabbitMQ's management plugin works the same way, over its direct Erlang
// client. A Direct is not listed among connections and takes no alarms (it
// never publishes).
//
// A Direct is for one caller at a time; Close releases what it holds
// (messages it got and did not settle go back to their queues).
type Direct struct {
	c        *conn
	ch       *channel
	out      directOut
	asBroker bool // opened with no user: every permission
}

// PermitTransientQueues lets d declare queues neither durable nor
// exclusive even when Options.DenyTransientNonExclQueues refuses them to
// clients: for the management API's aliveness test, whose queue is such
// a queue (RabbitMQ 4.x no longer declares one: its aliveness test is a
// no-op). Call it before d's first method.
func (d *Direct) PermitTransientQueues() { d.c.permitTransient = true }

// Reply is a method a Direct received, with its content for basic.get-ok.
type Reply struct {
	Method amqp.Method
	// Props is the raw property list and Body the body of a content
	// method; copies, owned by the caller.
	Props, Body []byte
}

// directOut collects what the channel sends. mu guards replies and
// closed; it is a leaf, taken by the channel's sends wherever they run:
// under channel.mu (a delivery), Queue.mu (consume-ok) or
// confirmTracker.mu (a confirm), or with no lock held.
type directOut struct {
	mu      sync.Mutex
	replies []Reply     // mu
	closed  *amqp.Error // mu
}

func (o *directOut) Send(m amqp.Method) {
	o.mu.Lock()
	o.replies = append(o.replies, Reply{Method: m})
	o.mu.Unlock()
}

func (o *directOut) SendContent(m amqp.Method, props, body []byte) {
	if d, ok := m.(*amqp.BasicDeliver); ok { // the channel's own, reused: keep a copy
		c := *d
		m = &c
	}
	r := Reply{Method: m, Props: append([]byte(nil), props...), Body: append([]byte(nil), body...)}
	o.mu.Lock()
	o.replies = append(o.replies, r)
	o.mu.Unlock()
}

// Later runs fn at once: a Direct has no writer.
func (o *directOut) Later(fn func()) { fn() }

func (o *directOut) Writable() bool  { return true }
func (o *directOut) Saturated() bool { return false }

func (o *directOut) Close(e *amqp.Error) {
	o.mu.Lock()
	if o.closed == nil {
		o.closed = e
	}
	o.mu.Unlock()
}

func (o *directOut) take() ([]Reply, *amqp.Error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.replies
	o.replies = nil
	return r, o.closed
}

// OpenDirect opens a Direct in vhost acting as user, with that user's
// permissions there. An empty user acts as the broker itself, with every
// permission (definitions import). The errors wrap ErrNotFound for an
// unknown vhost or user.
func (b *Broker) OpenDirect(name, vhost string) (*Direct, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return nil, fmt.Errorf("open direct channel: broker closed")
	}
	v := b.vhosts[vhost]
	if v == nil {
		return nil, notFoundf("no vhost '%s'", vhost)
	}
	u := auth.StoredUser("brokerd", "", nil, nil)
	perm := allPermissions
	if name != "" {
		if u = b.users[name]; u == nil {
			return nil, notFoundf("no user '%s'", name)
		}
		if perm = b.perms[permKey{user: name, vhost: vhost}]; perm == nil {
			return nil, &AccessError{Msg: fmt.Sprintf("access to vhost '%s' refused for user '%s'", vhost, name)}
		}
	}
	d := &Direct{asBroker: name == ""}
	d.c = &conn{b: b, vhost: v, userName: u.Name(), channels: map[uint16]*channel{}, done: make(chan struct{})}
	d.c.user.Store(u)
	d.c.perm.Store(perm)
	if name != "" {
		d.c.storeTopicPerms(b.topicPerms[permKey{user: name, vhost: vhost}])
	}
	d.c.ctx, d.c.cancel = context.WithCancel(context.Background())
	d.ch = newChannel(d.c, 1, &d.out)
	d.c.channels[1] = d.ch
	return d, nil
}

// allPermissions is the broker's own: every name, every kind.
var allPermissions = func() *auth.Permission {
	p, err := auth.NewPermission(".*", ".*", ".*")
	if err != nil {
		panic(err)
	}
	return p
}()

// AccessError is a management operation refused for want of a permission
// (HTTP 401 in RabbitMQ's API for a vhost, as for a login).
type AccessError struct{ Msg string }

func (e *AccessError) Error() string { return e.Msg }

// Do runs one method (without content) and returns what the channel sent
// in reply. A channel error (404, 403, 406 ...) is returned as the
// *amqp.Error; the Direct stays usable after it, unlike a client's
// channel, since nothing of the failed method took effect.
func (d *Direct) Do(m amqp.Method) ([]Reply, *amqp.Error) {
	err := d.ch.handle(m)
	replies, closed := d.out.take()
	if err == nil {
		err = closed
	}
	if err != nil && err.ClassID == 0 && err.MethodID == 0 {
		err.ClassID, err.MethodID = m.ClassID(), m.MethodID()
	}
	return replies, err
}

// Close releases the Direct: unsettled messages it got go back to their
// queues, marked redelivered.
func (d *Direct) Close() {
	d.ch.close()
	d.c.cancel()
	d.c.mu.Lock()
	qs := append([]*queue.Queue(nil), d.c.exclusive...)
	d.c.mu.Unlock()
	for _, q := range qs {
		d.c.b.deleteQueue(q)
	}
}

// Publish publishes a message as a client's basic.publish with the
// mandatory flag does (without confirm: the message is in its queues, not
// necessarily on disk, when it returns) and reports whether it reached a
// queue. It is refused while a resource alarm is in effect, where a client
// would be blocked.
func (d *Direct) Publish(exchange, key string, props amqp.Properties, body []byte) (routed bool, _ *amqp.Error) {
	if alarms := d.c.b.Alarms(); len(alarms) > 0 {
		return false, amqp.Errorf(amqp.ResourceError, "resource alarm in effect: %v", alarms)
	}
	raw, err := props.Append(nil)
	if err != nil {
		return false, amqp.Errorf(amqp.SyntaxError, "properties: %s", err)
	}
	m := &amqp.BasicPublish{Exchange: exchange, RoutingKey: key, Mandatory: true}
	if err := d.ch.Publish(m, &props, raw, append([]byte(nil), body...)); err != nil {
		var aerr *amqp.Error
		if errors.As(err, &aerr) {
			return false, aerr
		}
		return false, amqp.Errorf(amqp.InternalError, "%s", err)
	}
	replies, closed := d.out.take()
	if closed != nil {
		return false, closed
	}
	for _, r := range replies {
		if _, ok := r.Method.(*amqp.BasicReturn); ok {
			return false, nil
		}
	}
	return true, nil
}
