package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/broker/topology"
	"github.com/brokerd/brokerd/internal/loginlimit"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/ttl"
)

// Options configures a Broker.
type Options struct {
	// Store persists durable state. Required.
	Store store.Store
	// Logger receives operational messages; slog.Default() if nil.
	Logger *slog.Logger
	// VHosts are created on a fresh data dir (a store never bootstrapped;
	// one written before users were stored counts as fresh), as
	// RabbitMQ's default_vhost: afterwards vhosts are managed at run
	// time (PutVHost, DeleteVHost) and these are not created again.
	// Default: "/".
	VHosts []string
	// Users are created on a fresh data dir, with full permissions (".*")
	// on the bootstrap vhosts, as RabbitMQ's default_user: a user deleted
	// later stays deleted across restarts. Default: guest/guest,
	// administrator.
	Users []UserSpec
	// LoopbackUsers may log in only from a loopback address (RabbitMQ's
	// loopback_users), whenever they were created. Default: guest.
	LoopbackUsers []string
	// LoginLimit is the per-source budget of failed logins that Login
	// (every AMQP and HTTP API login) spends; a login over it is refused
	// without its password being checked. Default: loginlimit's defaults
	// (10 failures in a row, then one a second).
	LoginLimit *loginlimit.Limiter
	// MaxMessageSize bounds a message body. Default 128 MiB.
	MaxMessageSize int
	// MaxTxBytes bounds what one transaction's publishes hold (bodies,
	// properties, exchange and routing key, and txPublishOverhead each):
	// its commit is one store operation, and the write-ahead log takes
	// records up to 1 GiB. A publish that would take a transaction past it
	// closes the channel with 406 PRECONDITION_FAILED. Default 512 MiB.
	MaxTxBytes int64
	// Now is the clock for TTLs and queue leases; time.Now if nil. Tests
	// pass a clock they control.
	Now func() time.Time
	// TimerClock drives the expiry scheduler; the real clock if nil.
	TimerClock ttl.Clock
	// BacklogRetry is how often dead letters waiting for a route
	// (at-least-once) are retried besides when topology changes.
	// Default 1s.
	BacklogRetry time.Duration
	// PageWindow is how many ready entries of each priority level of a
	// queue stay in memory at the head (and again at the tail)
	// once the level is deeper than that; the rest stay in the store
	// only, so memory does not grow with queue depth. Default 2048;
	// negative keeps every entry in memory.
	PageWindow int
	// PageWindowBytes also bounds a window by the bytes of messages it
	// holds, bodies and properties, so a queue of large messages (or of
	// large headers) keeps fewer of them resident (a message larger than
	// it is resident alone). Default 4 MiB; negative: no byte bound.
	PageWindowBytes int64
	// DeliveredMarkChunk is how far ahead of deliveries a durable queue
	// writes its delivered marks (see deliveredmarks.go): after a crash at most
	// this many never-delivered messages per priority level (one and a
	// half times it, with a write under way) come back with
	// redelivered=true. Default 2048: a mark is written again when
	// deliveries come within half a chunk of it, and 1024 deliveries take
	// 5 ms at 200k msgs/s, more than a mark write needs under load. At
	// 512 the deliveries of a dead-lettering run kept catching up with the
	// mark and waiting for its write: publish-to-DLQ latency p50 12–17 ms
	// against 7–8 ms, 155–177k msgs/s against 168–180k.
	DeliveredMarkChunk int
	// Lease, if set, is a cluster leader's lease on deliveries
	// (queue.Lease): the broker delivers nothing while it lapses and
	// dispatches every queue again when it is regained. Nil (a single
	// node): deliveries never wait for one.
	Lease queue.Lease
	// ConsumerTimeout is how long a delivery may stay unacknowledged
	// before its channel is closed (RabbitMQ's consumer_timeout), unless
	// its queue sets one (x-consumer-timeout, policy consumer-timeout).
	// Default 30 minutes; negative: none.
	ConsumerTimeout time.Duration
	// ConsumerTimeoutCheck is how often deliveries are checked against
	// their timeout. Default 1s.
	ConsumerTimeoutCheck time.Duration
	// ConsumerTimeoutCancel makes a consumer timeout cancel only the
	// consumer (basic.cancel) whose delivery timed out, returning its
	// overdue deliveries, when its client announced
	// consumer_cancel_notify, as RabbitMQ 4.3 does for quorum queues;
	// other clients, basic.get deliveries and consumers the client
	// cancelled itself still have the channel closed. Default false: the
	// channel is closed (406), as RabbitMQ up to 4.2.
	ConsumerTimeoutCancel bool
	// DenyTransientNonExclQueues refuses to declare a queue that is
	// neither durable nor exclusive, as RabbitMQ 4.3 does by default
	// (its deprecated feature transient_nonexcl_queues, denied): 541
	// INTERNAL_ERROR, which closes the connection. Default false:
	// declared, as before.
	DenyTransientNonExclQueues bool
	// RecoveryProgress, if set, is called by Open as it restores the
	// stored entries of the durable queues: with the queues done and
	// their number, before the first and after each. It runs on the
	// goroutine that called Open (brokerd reports it to systemd as
	// STATUS=).
	RecoveryProgress func(done, total int)
	// Components are the runtime parameter components the broker takes
	// parameters of (params.go), by name ("shovel"); a parameter of any
	// other is refused. None by default.
	Components map[string]Component
}

// Broker holds every vhost, user and connection. It implements
// amqp.Handler.
//
// Concurrency: the fields before authMu are set by Open and not changed
// after; each lock guards the fields grouped under it; the others are
// atomics, types that lock for themselves, or say whose they are. The
// lock order is the package's (doc.go).
type Broker struct {
	// env is what the queue engine shares with the broker (broker/queue/env.go).
	env  *queue.Env
	opts Options

	// authMu serializes changes to users, vhosts and permissions, and
	// definitions imports, from the change in memory to the store's
	// completion, so a change the store refuses can be undone. It guards
	// no field of its own (they are mu's). Outermost: taken before every
	// other lock, never by connection code.
	authMu sync.Mutex
	// paramMu serializes runtime and global parameter changes (and the
	// imports and vhost deletions that change them) with their
	// components' notifications (params.go). Outermost: taken before
	// authMu; guards no field of its own (params and globals are mu's).
	paramMu sync.Mutex

	// mu guards the fields from here to bootstrapped, alarms, and every
	// vhost's VHost.meta. Taken alone or under authMu, a vhost's policyMu
	// (an import) or the login limiter's lock; only the store's are taken
	// under it. Never held with a VHost.mu or Queue.mu.
	mu     sync.RWMutex
	vhosts map[string]*VHost
	users  map[string]*auth.User
	perms  map[permKey]*auth.Permission
	conns  map[*conn]struct{}
	// userLimits are the users' limits, topicPerms their topic
	// permissions (tenancy.go).
	userLimits map[string]limitSet
	topicPerms map[permKey]topicPerms
	closed     bool
	// bootstrapped: the store holds the bootstrap mark (broker/defs).
	bootstrapped bool
	// params and globals are the runtime and global parameters (params.go).
	params  map[paramKey]json.RawMessage
	globals map[string]json.RawMessage
	// (end of mu's fields)

	queueID atomic.Uint64
	// idMu serializes the allocation of durable queue ids with the write
	// of their high-water mark, so marks reach the store in increasing
	// order. Taken alone or under authMu, policyMu or VHost.mu (an
	// import); only the store's are taken under it.
	idMu sync.Mutex
	// chanMu serializes the channel opens of users with a max-channels
	// limit (conn.admitChannel). Taken with no lock held; only mu is
	// taken under it.
	chanMu  sync.Mutex
	replyTo sync.Map // direct reply-to address → *channel

	alarms   alarmState    // guarded by mu
	quit     chan struct{} // stops the backlog retry and consumer timeout loops
	wg       sync.WaitGroup
	redrives redrives // background redrive tasks
}

// withDefaults returns o with the options left zero (or, for the sizes
// and periods, negative) set to their defaults.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if len(o.VHosts) == 0 {
		o.VHosts = []string{"/"}
	}
	if o.Users == nil {
		o.Users = []UserSpec{{Name: "guest", Password: "guest", Tags: []string{"administrator"}}}
	}
	if o.LoopbackUsers == nil {
		o.LoopbackUsers = []string{"guest"}
	}
	if o.LoginLimit == nil {
		o.LoginLimit = loginlimit.New(loginlimit.Options{})
	}
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = 128 << 20
	}
	if o.MaxTxBytes <= 0 {
		o.MaxTxBytes = 512 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.PageWindow == 0 {
		o.PageWindow = 2048
	}
	if o.PageWindowBytes == 0 {
		o.PageWindowBytes = 4 << 20
	}
	if o.DeliveredMarkChunk <= 0 {
		o.DeliveredMarkChunk = 2048
	}
	if o.BacklogRetry <= 0 {
		o.BacklogRetry = time.Second
	}
	if o.ConsumerTimeout == 0 {
		o.ConsumerTimeout = 30 * time.Minute
	}
	if o.ConsumerTimeoutCheck <= 0 {
		o.ConsumerTimeoutCheck = time.Second
	}
	return o
}

// Open starts a broker over opts.Store, recovering its durable state; on
// a fresh store it first creates Options.VHosts and Options.Users.
func Open(opts Options) (*Broker, error) {
	if opts.Store == nil {
		return nil, errors.New("broker: no store")
	}
	opts = opts.withDefaults()
	bootUsers := make([]*auth.User, 0, len(opts.Users))
	for _, spec := range opts.Users {
		u, err := auth.NewUser(spec)
		if err != nil {
			return nil, fmt.Errorf("bootstrap user '%s': %w", spec.Name, err)
		}
		bootUsers = append(bootUsers, u)
	}
	b := &Broker{
		opts:       opts,
		vhosts:     make(map[string]*VHost),
		users:      make(map[string]*auth.User),
		perms:      make(map[permKey]*auth.Permission),
		params:     make(map[paramKey]json.RawMessage),
		globals:    make(map[string]json.RawMessage),
		userLimits: make(map[string]limitSet),
		topicPerms: make(map[permKey]topicPerms),
		conns:      make(map[*conn]struct{}),
		quit:       make(chan struct{}),
	}
	cfg := queue.Config{Now: opts.Now, PageWindow: opts.PageWindow, PageWindowBytes: opts.PageWindowBytes, DeliveredMarkChunk: opts.DeliveredMarkChunk,
		Lease: opts.Lease}
	b.env = queue.NewEnv(cfg, opts.Logger, opts.Store, func() { b.SetAlarm(AlarmStore, true) }, func(q *queue.Queue) { b.deleteQueue(q) })
	b.SetConsumerTimeout(opts.ConsumerTimeout)
	b.env.Timers = ttl.NewScheduler(opts.TimerClock, b.env.FireTimers)
	if err := b.recoverDefinitions(); err != nil {
		b.env.Timers.Close()
		return nil, fmt.Errorf("recover definitions: %w", err)
	}
	if err := b.bootstrap(bootUsers); err != nil {
		b.env.Timers.Close()
		return nil, err
	}
	resume, err := b.recoverRedrives()
	if err != nil {
		b.env.Timers.Close()
		return nil, fmt.Errorf("recover redrive tasks: %w", err)
	}
	b.wg.Add(2)
	go b.every(opts.BacklogRetry, b.retryAllBacklogs)
	go b.every(opts.ConsumerTimeoutCheck, b.checkConsumerTimeouts)
	if opts.PageWindow > 0 {
		b.env.StartHorizon(b.quit, &b.wg, b.queuesByID)
	}
	if opts.Lease != nil {
		b.wg.Add(1)
		go b.watchLease(opts.Lease)
	}
	for _, t := range resume {
		b.launchRedrive(t)
	}
	return b, nil
}

// every runs fn each period until the broker closes; it is one of the
// goroutines Close waits for (b.wg).
func (b *Broker) every(period time.Duration, fn func()) {
	defer b.wg.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-b.quit:
			return
		case <-t.C:
			fn()
		}
	}
}

// retryAllBacklogs retries the waiting dead letters of every vhost that
// may succeed now. It runs periodically: besides topology changes
// (handled at once), a target that was full may have room now.
func (b *Broker) retryAllBacklogs() {
	b.mu.RLock()
	vs := make([]*VHost, 0, len(b.vhosts))
	for _, v := range b.vhosts {
		vs = append(vs, v)
	}
	b.mu.RUnlock()
	for _, v := range vs {
		b.retryBacklogsIfChanged(v)
	}
}

// Close closes every connection (connection.close 320 CONNECTION_FORCED)
// and stops the broker. It does not close the store. Idempotent.
func (b *Broker) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	conns := make([]*conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	b.mu.Unlock()
	for _, c := range conns {
		c.ac.Close(amqp.Errorf(amqp.ConnectionForced, "broker forced connection closure with reason 'shutdown'"))
	}
	b.env.StopAsync()
	b.storeExactMarks()
	close(b.quit)
	b.wg.Wait()
	b.env.Timers.Close()
	b.env.StopLogs()
}

// OpenConnection implements amqp.Handler.
func (b *Broker) OpenConnection(ac *amqp.ServerConn, user, vhost string) (amqp.Session, *amqp.Error) {
	return b.openConnection(ac, user, vhost, false)
}

// OpenInternalConnection is OpenConnection for the broker's own clients
// (a shovel's side on this broker, RabbitMQ's direct connection): the
// connection has every permission in vhost and the impersonator tag (it
// forwards messages whose user_id another user set), as user name, which
// need not exist and is shown as the connection's user. Changes to users
// and permissions leave it alone; the vhost's deletion closes it. The
// caller serves such connections on no listener a client can reach.
func (b *Broker) OpenInternalConnection(ac *amqp.ServerConn, name, vhost string) (amqp.Session, *amqp.Error) {
	return b.openConnection(ac, name, vhost, true)
}

func (b *Broker) openConnection(ac *amqp.ServerConn, user, vhost string, internal bool) (amqp.Session, *amqp.Error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, amqp.Errorf(amqp.ConnectionForced, "broker is shutting down")
	}
	v := b.vhosts[vhost]
	if v == nil {
		return nil, amqp.Errorf(amqp.NotAllowed, "vhost %s not found", vhost)
	}
	u := b.users[user] // nil if deleted since its login
	// rabbit_reader's order: the vhost's and the user's connection
	// limits, then the access check. The broker's own connections (a
	// shovel's side on this broker) are not limited, nor counted.
	if !internal {
		if err := b.connectionLimitErrorLocked(v, user); err != nil {
			return nil, err
		}
	}
	perm := b.perms[permKey{user: user, vhost: vhost}]
	if internal {
		u, perm = internalUser(user), allPermissions
	}
	if u == nil || perm == nil {
		return nil, amqp.Errorf(amqp.NotAllowed, "access to vhost '%s' refused for user '%s'", vhost, user)
	}
	c := &conn{b: b, ac: ac, vhost: v, userName: user, internal: internal, channels: map[uint16]*channel{}, done: make(chan struct{}), opened: time.Now(), bursts: true}
	c.user.Store(u)
	c.perm.Store(perm)
	c.storeTopicPerms(b.topicPerms[permKey{user: user, vhost: vhost}])
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if caps, ok := ac.ClientProperties().Get("capabilities"); ok {
		if t, ok := caps.(amqp.Table); ok {
			if v, ok := t.Get("consumer_cancel_notify"); ok {
				c.cancelNotify, _ = v.(bool)
			}
		}
	}
	b.conns[c] = struct{}{}
	return c, nil
}

func (b *Broker) dropConn(c *conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
}

func (b *Broker) newQueueID() store.QueueID { return store.QueueID(b.queueID.Add(1)) }

// newDurableQueueID allocates an id for a queue whose entries may be stored
// and records it as the high-water mark, so a restart never hands it out
// again. Allocation and write are serialized so the marks reach the store
// in increasing order.
func (b *Broker) newDurableQueueID() store.QueueID {
	b.idMu.Lock()
	defer b.idMu.Unlock()
	id := b.newQueueID()
	var mb defs.Batch
	mb.Put(defs.EncodeQueueIDMark(uint64(id)))
	b.startMeta(&mb) // ordered before the queue's definition, which waits
	return id
}

// removeConsumer cancels c on its queue and deletes the queue if it is
// auto-delete and c was its last consumer.
func (b *Broker) removeConsumer(c *queue.Consumer) {
	if c.Queue.RemoveConsumer(c) {
		b.deleteQueue(c.Queue) // a store failure is recorded by storeFailed
	}
}

// deleteQueue removes q with its bindings and messages; consumers get a
// basic.cancel. It returns the number of ready messages dropped and the
// store write of the deletion, to wait for before telling a client the
// queue is gone.
//
// The deletion is handed to the store with q's lock held (so it comes after
// every change to q's entries) and the vhost lock held (so it comes after
// every binding to q and before any change made once q is gone from the
// vhost): lock order Queue.mu → VHost.mu.
func (b *Broker) deleteQueue(q *queue.Queue) (int, *queue.StoreWrite) {
	n, w, _ := b.deleteQueueFor(q, nil)
	return n, w
}

// deleteQueueFor is deleteQueue for a queue.delete on ch: the consumers
// ch itself has on q are not told here but returned, for the caller to
// cancel (channel.serverCancel) once it has sent queue.delete-ok.
// RabbitMQ's deleting channel sees delete-ok first (its queue process
// replies, then exits, and the channel cancels its consumers when it sees
// the exit), and clients rely on it: amqplib settles the delete's promise
// on delete-ok, and a basic.cancel before it lets an application close the
// channel with the delete still waiting for its reply. Consumers on other
// channels are told at once, as before: RabbitMQ gives them no order
// against another channel's reply.
func (b *Broker) deleteQueueFor(q *queue.Queue, ch *channel) (int, *queue.StoreWrite, []*queue.Consumer) {
	v := vhostOf(q)
	consumers, messages, w, ok := q.Delete(func() ([]store.MetaOp, bool) {
		v.mu.Lock()
		if v.topo.Queues[q.Name] != q {
			return nil, false // deleted already: wait for that deletion
		}
		delete(v.topo.Queues, q.Name)
		var mb defs.Batch
		for _, bd := range append([]*topology.Binding(nil), v.topo.QueueBindings[q]...) {
			if src := v.topo.Exchanges[bd.Source]; src != nil {
				v.topo.RemoveBinding(src, bd, &mb)
			}
		}
		delete(v.topo.QueueBindings, q)
		if q.Durable && !q.Exclusive {
			mb.Delete(defs.QueueKey(v.Name, q.Name))
		}
		return mb.Ops, true
	}, v.mu.Unlock)
	if !ok {
		return 0, w, nil
	}
	b.deleteUnheld(v) // auto-delete delayed exchanges q was bound to
	var own []*queue.Consumer
	for _, c := range consumers {
		if ch != nil && c.Ch == ch {
			own = append(own, c)
			continue
		}
		c.Ch.ServerCancel(c)
	}
	if q.Owner != nil {
		q.Owner.(*conn).removeExclusive(q)
	}
	return messages, w, own
}

// VHost returns the named vhost, or nil.
func (b *Broker) VHost(name string) *VHost {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.vhosts[name]
}

// internalUser is the user record of an internal connection: no
// password (no login), the impersonator tag.
func internalUser(name string) *auth.User {
	return auth.StoredUser(name, "", nil, []string{"impersonator"})
}
