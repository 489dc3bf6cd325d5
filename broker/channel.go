package broker

import (
	"sort"
	"sync"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/broker/stats"
)

// delivery is one unacknowledged delivery on a channel.
type delivery struct {
	tag uint64
	q   *queue.Queue
	e   *queue.Entry
	c   *queue.Consumer // nil for basic.get
	at  int64           // when it was delivered (broker clock, ms): consumer timeout
}

// channel is the broker side of an AMQP channel.
//
// Concurrency: methods are called from the connection's reader goroutine;
// queues call tryDeliver and recordGet from other goroutines with the
// queue lock held (and the vhost lock shared, when the same operation
// dead-lettered). id, conn and out are fixed; the fields marked "reader
// goroutine only" are the reader's; mu guards pendingDs, pendingActs,
// deliverMsg, every field after it but confirms (which locks for itself),
// and the unacked count of each of the channel's consumers. Code holding
// mu takes only confirmTracker.mu and the connection's (or a Direct's)
// write lock, never a queue or vhost lock (broker/doc.go).
type channel struct {
	id   uint16
	conn *conn
	out  amqp.ChannelOut

	committing *pendingCommit // the last tx.commit; reader goroutine only
	routeBuf   []*queue.Queue // a publish's route, reused; reader goroutine only
	ackBuf     []*delivery    // an ack's deliveries, reused; reader goroutine only

	deliveryStats stats.Consumption // for the management API's rates; atomics

	// Acks, nacks and rejects put off to the end of a burst of frames
	// (conn.bursts): the deliveries in order, and runs of them with one
	// action. mu.
	pendingDs   []*delivery
	pendingActs []queue.SettleRun

	deliverMsg amqp.BasicDeliver // the basic.deliver being sent; mu

	mu             sync.Mutex
	closed         bool
	timedOut       bool // closed for a consumer timeout, the close-ok not yet in
	flowActive     bool
	nextTag        uint64
	unacked        []*delivery // ascending tags; settled slots are nil
	unackedHead    int
	unackedN       int
	consumers      map[string]*queue.Consumer
	prefetch       int // basic.qos global=false: for consumers created later
	globalPrefetch int // basic.qos global=true: shared by the channel

	// confirm mode (publisher confirms)
	confirm    bool
	publishSeq uint64
	confirms   confirmTracker // not mu's: it has its own lock (confirm.go)

	// tx mode
	tx        bool
	txPubs    []*pendingPublish
	txBytes   int64 // what txPubs hold, as Options.MaxTxBytes counts it
	txAcks    []txAck
	replyTo   string // direct reply-to address of this channel, "" if not consuming
	replyTag  string // consumer tag of the direct reply-to consumer
	lastQueue string // the queue last declared on this channel (for empty names)

	// reclaimed are the tags of deliveries returned to their queues for a
	// consumer timeout (cancelTimedOut): a late ack, nack or reject of
	// one is ignored, not an unknown tag. timedOutCons are the consumers
	// cancelled for one, whose later overdue deliveries return too.
	reclaimed    map[uint64]struct{}
	timedOutCons map[*queue.Consumer]bool
}

type txAck struct {
	ds     []*delivery
	action queue.SettleAction
}

func newChannel(c *conn, id uint16, out amqp.ChannelOut) *channel {
	return &channel{id: id, conn: c, out: out, flowActive: true, nextTag: 1, consumers: make(map[string]*queue.Consumer)}
}

// TryDeliver hands e to consumer c if the channel can take it now.
// Called with q.mu held.
func (ch *channel) TryDeliver(c *queue.Consumer, q *queue.Queue, e *queue.Entry, props []byte) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed || ch.timedOut || !ch.flowActive || ch.consumers[c.Tag] != c {
		return false
	}
	if !c.NoAck {
		if c.Prefetch > 0 && c.Unacked >= c.Prefetch {
			return false
		}
		if ch.globalPrefetch > 0 && ch.unackedN >= ch.globalPrefetch {
			return false
		}
	}
	if !ch.out.Writable() {
		return false
	}
	tag := ch.nextTag
	ch.nextTag++
	if !c.NoAck {
		ch.addUnackedLocked(&delivery{tag: tag, q: q, e: e, c: c, at: q.Env.NowMS()})
		c.Unacked++
	}
	q.Env.Counters.Delivered.Add(false, c.NoAck, e.Redelivered)
	q.Stats.Delivered.Add(false, c.NoAck, e.Redelivered)
	ch.deliveryStats.Delivered.Add(false, c.NoAck, e.Redelivered)
	h := e.EffectiveHeader()
	// The channel's one basic.deliver, rewritten under ch.mu: SendContent
	// reads its method only during the call.
	ch.deliverMsg = amqp.BasicDeliver{
		ConsumerTag: c.Tag,
		DeliveryTag: tag,
		Redelivered: e.Redelivered,
		Exchange:    h.Exchange,
		RoutingKey:  h.RoutingKeys[0],
	}
	ch.out.SendContent(&ch.deliverMsg, props, e.Msg.Body)
	return true
}

// RecordGet allocates a delivery tag for basic.get. Called with q.mu held.
func (ch *channel) RecordGet(q *queue.Queue, e *queue.Entry, noAck bool) uint64 {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	tag := ch.nextTag
	ch.nextTag++
	if !noAck {
		ch.addUnackedLocked(&delivery{tag: tag, q: q, e: e, at: q.Env.NowMS()})
	}
	return tag
}

func (ch *channel) addUnackedLocked(d *delivery) {
	ch.unacked = append(ch.unacked, d)
	ch.unackedN++
}

// takeUnackedLocked removes and returns the deliveries an ack/nack/reject
// with (tag, multiple) settles, in tag order. tag 0 with multiple means all.
func (ch *channel) takeUnackedLocked(tag uint64, multiple bool, dst []*delivery) ([]*delivery, *amqp.Error) {
	live := ch.unacked[ch.unackedHead:]
	out := dst
	if multiple {
		end := len(live)
		if tag != 0 {
			// As in RabbitMQ, the tag itself must be outstanding, not
			// just some tag below it.
			end = 0
			for i, d := range live {
				if d != nil && d.tag >= tag {
					if d.tag == tag {
						end = i + 1
					}
					break
				}
			}
			if end == 0 {
				if _, ok := ch.reclaimed[tag]; !ok {
					return nil, amqp.Errorf(amqp.PreconditionFailed, "unknown delivery tag %d", tag)
				}
				// Returned for a consumer timeout: what is below it.
				for end < len(live) && (live[end] == nil || live[end].tag < tag) {
					end++
				}
			}
			ch.forgetReclaimedLocked(tag)
		} else {
			clear(ch.reclaimed)
		}
		for i, d := range live[:end] {
			if d != nil {
				out = append(out, d)
				live[i] = nil
			}
		}
	} else {
		// Acks mostly arrive in order, so the tag is near the head.
		i := 0
		for i < len(live) && (live[i] == nil || live[i].tag < tag) {
			i++
		}
		if i == len(live) || live[i].tag != tag {
			if _, ok := ch.reclaimed[tag]; ok {
				delete(ch.reclaimed, tag) // returned for a consumer timeout
				return dst, nil
			}
			return nil, amqp.Errorf(amqp.PreconditionFailed, "unknown delivery tag %d", tag)
		}
		out = append(out, live[i])
		live[i] = nil
	}
	ch.unackedN -= len(out) - len(dst)
	ch.compactLocked()
	for _, d := range out[len(dst):] {
		if d.c != nil {
			d.c.Unacked--
		}
	}
	return out, nil
}

// forgetReclaimedLocked drops the reclaimed tags up to tag, which an
// ack, nack or reject with multiple has settled.
func (ch *channel) forgetReclaimedLocked(tag uint64) {
	for t := range ch.reclaimed {
		if t <= tag {
			delete(ch.reclaimed, t)
		}
	}
}

// compactLocked drops settled slots at the head and, when the slice is
// mostly holes, rebuilds it.
func (ch *channel) compactLocked() {
	for ch.unackedHead < len(ch.unacked) && ch.unacked[ch.unackedHead] == nil {
		ch.unacked[ch.unackedHead] = nil
		ch.unackedHead++
	}
	if ch.unackedHead == len(ch.unacked) {
		ch.unacked, ch.unackedHead = ch.unacked[:0], 0
		return
	}
	if live := len(ch.unacked) - ch.unackedHead; live > 64 && ch.unackedN < live/4 {
		out := make([]*delivery, 0, ch.unackedN*2)
		for _, d := range ch.unacked[ch.unackedHead:] {
			if d != nil {
				out = append(out, d)
			}
		}
		ch.unacked, ch.unackedHead = out, 0
	}
}

// holdCreditLocked adds (n=1) or removes (n=-1) the prefetch credit that
// deliveries acked inside a transaction keep until the commit.
func (ch *channel) holdCreditLocked(ds []*delivery, n int) {
	ch.unackedN += n * len(ds)
	for _, d := range ds {
		if d.c != nil {
			d.c.Unacked += n
		}
	}
}

// restoreUnackedLocked puts deliveries back (tx rollback), keeping order.
func (ch *channel) restoreUnackedLocked(ds []*delivery) {
	all := make([]*delivery, 0, ch.unackedN+len(ds))
	for _, d := range ch.unacked[ch.unackedHead:] {
		if d != nil {
			all = append(all, d)
		}
	}
	all = append(all, ds...)
	sort.Slice(all, func(i, j int) bool { return all[i].tag < all[j].tag })
	ch.unacked, ch.unackedHead, ch.unackedN = all, 0, len(all)
	for _, d := range ds {
		if d.c != nil {
			d.c.Unacked++
		}
	}
}

// maxPendingSettles bounds the deliveries a channel puts off settling: a
// burst that long is settled at once.
const maxPendingSettles = 4096

// flushSettles settles the acks, nacks and rejects put off so far, in
// their order (settleRuns). Any goroutine.
func (ch *channel) flushSettles() {
	ch.mu.Lock()
	ds, acts := ch.pendingDs, ch.pendingActs
	ch.pendingDs, ch.pendingActs = nil, nil
	ch.mu.Unlock()
	if len(ds) > 0 {
		ch.settleRuns(ds, acts)
	}
}

// settle applies an ack, requeue or reject to deliveries already taken
// from the unacked list (settleRuns with one run).
func (ch *channel) settle(ds []*delivery, action queue.SettleAction) {
	ch.settleRuns(ds, []queue.SettleRun{{N: len(ds), Action: action}})
}

// settleRuns settles deliveries already taken from the unacked list, in
// runs of one action, in order: per queue, one hold of its lock and one
// store operation, in which the queue then delivers into the credit its
// consumers got back. Only a channel-wide prefetch (basic.qos global)
// frees credit for the channel's other queues too: they are kicked then.
func (ch *channel) settleRuns(ds []*delivery, acts []queue.SettleRun) {
	var buf [32]*queue.Entry
	var runBuf [8]queue.SettleRun
	for len(ds) > 0 {
		q := ds[0].q
		rest := ds[:0:0]
		es, runs := buf[:0], runBuf[:0]
		i := 0
		for _, a := range acts {
			n := 0
			for _, d := range ds[i : i+a.N] {
				if d.q == q {
					es = append(es, d.e)
					n++
				} else {
					rest = append(rest, d)
				}
			}
			i += a.N
			if n > 0 {
				runs = append(runs, queue.SettleRun{N: n, Action: a.Action})
			}
		}
		q.SettleRuns(es, runs)
		if len(rest) == 0 {
			break
		}
		// The other queues' deliveries, with their runs recounted.
		var next []queue.SettleRun
		i = 0
		for _, a := range acts {
			n := 0
			for _, d := range ds[i : i+a.N] {
				if d.q != q {
					n++
				}
			}
			i += a.N
			if n > 0 {
				next = append(next, queue.SettleRun{N: n, Action: a.Action})
			}
		}
		ds, acts = rest, next
	}
	ch.mu.Lock()
	global := ch.globalPrefetch > 0
	ch.mu.Unlock()
	if global {
		ch.kick()
	}
}

// forEachQueue calls fn for each queue of ds with that queue's entries,
// in the order of ds.
func forEachQueue(ds []*delivery, fn func(q *queue.Queue, es []*queue.Entry)) {
	for len(ds) > 0 {
		q := ds[0].q
		var es []*queue.Entry
		rest := ds[:0:0]
		for _, d := range ds {
			if d.q == q {
				es = append(es, d.e)
			} else {
				rest = append(rest, d)
			}
		}
		fn(q, es)
		ds = rest
	}
}

// kick lets every queue this channel consumes from deliver.
func (ch *channel) kick() {
	ch.mu.Lock()
	qs := make([]*queue.Queue, 0, len(ch.consumers))
	for _, c := range ch.consumers {
		qs = append(qs, c.Queue)
	}
	ch.mu.Unlock()
	for _, q := range qs {
		q.Dispatch()
	}
}

// close releases the channel: consumers are cancelled and unacked
// deliveries returned to their queues. Idempotent.
func (ch *channel) close() {
	ch.flushSettles() // the client acked them: settled, not requeued
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return
	}
	ch.closed = true
	consumers := make([]*queue.Consumer, 0, len(ch.consumers))
	for _, c := range ch.consumers {
		consumers = append(consumers, c)
	}
	clear(ch.consumers)
	var ds []*delivery
	for _, d := range ch.unacked[ch.unackedHead:] {
		if d != nil {
			ds = append(ds, d)
		}
	}
	for _, a := range ch.txAcks {
		ds = append(ds, a.ds...)
	}
	ch.unacked, ch.unackedHead, ch.unackedN, ch.txAcks, ch.txPubs = nil, 0, 0, nil, nil
	replyTo := ch.replyTo
	ch.mu.Unlock()

	if replyTo != "" {
		ch.conn.b.replyTo.Delete(replyTo)
	}
	for _, c := range consumers {
		ch.conn.b.removeConsumer(c)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].tag < ds[j].tag })
	if len(ds) > 0 {
		ch.settle(ds, queue.SettleRequeue)
	}
	// Only now, with the unacked back at the head: a single active
	// consumer's successor takes over what is ready.
	for _, c := range consumers {
		c.Queue.Dispatch()
	}
	ch.confirms.close()
}
