package broker

import (
	"strconv"
	"strings"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/store"
)

// pendingPublish is a validated basic.publish, ready to route.
type pendingPublish struct {
	queue.Incoming // the message as its queues take it
	exchange       string
	mandatory      bool
	headers        amqp.Table // decoded headers, for headers exchanges
	seq            uint64     // confirm number; 0 when not in confirm mode
}

// publishAlloc is a publish with its message, its (one) routing key and
// its first queue entry, allocated together. The message and the entry
// keep the block alive as long as a queue holds either: the publish's own
// fields cost ~80 bytes more per resident message than a message and an
// entry alone, for three allocations less per publish.
type publishAlloc struct {
	p   pendingPublish
	msg store.Message
	key [1]string
	e   queue.Entry
}

// parseExpiration validates the expiration property as RabbitMQ does
// (rabbit_basic:parse_expiration): a decimal integer 0..10 years in ms.
func parseExpiration(s string) (int64, *amqp.Error) {
	fail := func(reason string) *amqp.Error {
		return amqp.Errorf(amqp.PreconditionFailed, "invalid expiration '%s': %s", s, reason)
	}
	// string:to_integer accepts an optional sign and leading digits.
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == i {
		return 0, fail("no_integer")
	}
	if j < len(s) {
		return 0, fail("{leftover_string," + erlString(s[j:]) + "}")
	}
	n, err := strconv.ParseInt(s[:j], 10, 64)
	if err != nil {
		// Out of int64 range: certainly too large (or too negative).
		if s[0] == '-' {
			return 0, fail("{value_negative," + s + "}")
		}
		return 0, fail("{value_too_large," + strings.TrimPrefix(s, "+") + "}")
	}
	switch {
	case n < 0:
		return 0, fail("{value_negative," + strconv.FormatInt(n, 10) + "}")
	case n > queue.MaxExpiration:
		return 0, fail("{value_too_large," + strconv.FormatInt(n, 10) + "}")
	}
	return n, nil
}

// RedeliveredHeader, set true on a message published over an internal
// connection (a shovel's side on this broker: LocalConnector), says that
// the message was delivered before, elsewhere: the shovel forwards a copy
// its source delivered again (flagged redelivered), and a copy may
// already be here, confirmed before a crash took the source's ack with
// it. The broker removes the header and enqueues the message as delivered
// once (delivery count 1), so that its first delivery here is flagged
// redelivered, after a restart too: a consumer told to check redelivered
// messages for duplicates sees the copy flagged. From a client's
// connection the header is an ordinary one.
const RedeliveredHeader = "x-brokerd-redelivered"

// erlString renders s as Erlang's ~p prints a string.
func erlString(s string) string { return strconv.Quote(s) }

// preparePublish validates a basic.publish and builds the message. The
// body and raw properties become owned by the message.
func (ch *channel) preparePublish(m *amqp.BasicPublish, props *amqp.Properties, raw, body []byte) (*pendingPublish, *amqp.Error) {
	c := ch.conn
	if m.Immediate {
		return nil, amqp.Errorf(amqp.NotImplemented, "immediate=true")
	}
	if len(body) > c.b.opts.MaxMessageSize {
		return nil, amqp.Errorf(amqp.PreconditionFailed, "message size %d is larger than configured max size %d", len(body), c.b.opts.MaxMessageSize)
	}
	if err := c.checkPerm(auth.Write, "exchange", m.Exchange); err != nil {
		return nil, err
	}
	v := c.vhost
	v.mu.RLock()
	x := v.topo.Exchanges[m.Exchange]
	v.mu.RUnlock()
	if x == nil {
		return nil, errNoExchange(v.Name, m.Exchange)
	}
	if x.Internal {
		return nil, amqp.Errorf(amqp.AccessRefused, "cannot publish to internal exchange '%s' in vhost '%s'", m.Exchange, v.Name)
	}
	if err := c.checkTopic(auth.Write, x, m.RoutingKey); err != nil {
		return nil, err
	}
	// One allocation for the publish, its message and its routing key.
	a := &publishAlloc{p: pendingPublish{exchange: m.Exchange, mandatory: m.Mandatory, Incoming: queue.Incoming{TTL: -1, Prio: props.Priority}}}
	p := &a.p
	p.Entry = &a.e
	if props.Flags&amqp.FlagExpiration != 0 {
		ttl, err := parseExpiration(props.Expiration)
		if err != nil {
			return nil, err
		}
		p.TTL = ttl
	}
	// A user tagged impersonator may publish as anyone (rabbit_channel
	// check_user_id_header).
	if props.Flags&amqp.FlagUserID != 0 && props.UserID != c.userName && !c.user.Load().HasTag("impersonator") {
		return nil, amqp.Errorf(amqp.PreconditionFailed, "user_id property set to '%s' but authenticated user was '%s'", props.UserID, c.userName)
	}
	a.key[0] = m.RoutingKey
	keys := a.key[:1:1]
	rewrite := false
	if props.Headers != nil {
		cc, err := senderKeys(props.Headers, "CC")
		if err != nil {
			return nil, err
		}
		bcc, err := senderKeys(props.Headers, "BCC")
		if err != nil {
			return nil, err
		}
		keys = append(append(keys, cc...), bcc...)
		if _, ok := props.Headers.Get("BCC"); ok {
			// BCC is never delivered (B20); its keys still route.
			props.Headers = props.Headers.Without("BCC")
			rewrite = true
		}
		if v, ok := props.Headers.Get(RedeliveredHeader); ok && c.internal {
			// A shovel's copy of a message its source delivered before.
			p.Redelivered, _ = v.(bool)
			props.Headers = props.Headers.Without(RedeliveredHeader)
			rewrite = true
		}
		if rewrite && len(props.Headers) == 0 {
			props.Headers, props.Flags = nil, props.Flags&^amqp.FlagHeaders
		}
		p.headers = props.Headers
	}
	if props.Flags&amqp.FlagReplyTo != 0 && props.ReplyTo == replyToQueue {
		addr, err := ch.replyAddress()
		if err != nil {
			return nil, err
		}
		props.ReplyTo = addr
		rewrite = true
	}
	if rewrite {
		enc, err := props.Append(nil)
		if err != nil {
			return nil, amqp.Errorf(amqp.InternalError, "re-encode properties: %s", err)
		}
		raw = enc
	}
	p.Msg = &a.msg
	p.Msg.ID = c.b.env.Store.AllocMsgID() // fixed now: copies in several queues share it
	p.Msg.Header = store.Header{Exchange: m.Exchange, RoutingKeys: keys, Props: raw}
	p.Msg.Body = body
	p.Msg.Persistent = props.DeliveryMode == 2
	return p, nil
}

// senderKeys returns the longstr routing keys of a CC or BCC header. A
// header that is not an array is a channel error (RabbitMQ: invalid
// message); non-string elements are ignored.
func senderKeys(h amqp.Table, name string) ([]string, *amqp.Error) {
	v, ok := h.Get(name)
	if !ok {
		return nil, nil
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, amqp.Errorf(amqp.PreconditionFailed, "invalid message: {unacceptable_type_in_header,\"%s\",%s}", name, amqp.TypeName(v))
	}
	var keys []string
	for _, e := range arr {
		if s, ok := e.(string); ok { // longstr only, as rabbit_basic:header_routes
			keys = append(keys, s)
		}
	}
	return keys, nil
}

// publish routes p and enqueues it, sending basic.return for an
// unroutable mandatory message and the publisher confirm when the message
// is safe (immediately, or when the store has made it durable).
func (ch *channel) publish(p *pendingPublish) {
	qs := ch.route(p, ch.routeBuf[:0])
	ch.routeBuf = qs[:0] // reused: enqueue keeps none of qs
	if len(qs) == 0 {
		ch.confirmDone(p.seq, true, false)
		return
	}
	var done func(ack, inGroup bool)
	if p.seq != 0 {
		done = func(ack, inGroup bool) { ch.confirms.done(p.seq, ack, inGroup) }
	}
	ch.conn.b.env.Enqueue(qs, &p.Incoming, done)
}

// route returns the queues p goes to, appended to dst. A direct
// reply-to message is handed to its consumer at once and an unroutable
// mandatory one returned; for those, and any other message routed
// nowhere, it returns none.
func (ch *channel) route(p *pendingPublish, dst []*queue.Queue) []*queue.Queue {
	c := ch.conn
	b := c.b
	h := &p.Msg.Header
	if p.exchange == "" && strings.HasPrefix(h.RoutingKeys[0], replyToPrefix) {
		delivered := b.deliverReply(h.RoutingKeys[0], p.Msg)
		b.env.Counters.Published.Add(1) // RabbitMQ counts these as received too
		ch.confirms.stats.Publish.Add(1)
		switch {
		case delivered:
			b.env.Counters.Routed.Add(1)
		case p.mandatory:
			b.env.Counters.Unroutable.Add(1)
			b.env.Counters.Returned.Add(1)
			ch.confirms.stats.Returned.Add(1)
			ch.sendReturn(p.Msg)
		default:
			b.env.Counters.Unroutable.Add(1)
			ch.confirms.stats.Dropped.Add(1)
		}
		return nil
	}
	v := c.vhost
	v.mu.RLock()
	x := v.topo.Exchanges[p.exchange]
	var qs []*queue.Queue
	if x != nil {
		var held bool
		p.Due, held = queue.DueAt(p.headers, b.env.ArrivalMS)
		switch {
		case !held:
			qs = v.topo.RouteInto(dst, x, h.RoutingKeys, p.headers)
		case p.mandatory && len(v.topo.RouteInto(dst, x, h.RoutingKeys, p.headers)) == 0:
			// A delayed exchange holds a mandatory message only if it
			// would reach a queue now: what can be known at publish.
		default:
			qs = v.topo.RouteHeldInto(dst, x, h.RoutingKeys, p.headers)
		}
	}
	v.mu.RUnlock()
	// Routed: the decoded headers are not needed again, and p lives as
	// long as its message's first entry (publishAlloc), so they would
	// double what a resident message with a large header holds.
	p.headers = nil
	b.env.Counters.Published.Add(1)
	ch.confirms.stats.Publish.Add(1)
	if x != nil {
		x.Stats.PublishIn.Add(1)
		x.Stats.PublishOut.Add(uint64(len(qs)))
	}
	if len(qs) == 0 {
		b.env.Counters.Unroutable.Add(1)
		if p.mandatory {
			b.env.Counters.Returned.Add(1)
			ch.confirms.stats.Returned.Add(1)
			ch.sendReturn(p.Msg)
		} else {
			ch.confirms.stats.Dropped.Add(1)
		}
	} else {
		b.env.Counters.Routed.Add(1)
	}
	return qs
}

func (ch *channel) sendReturn(m *store.Message) {
	ch.out.SendContent(&amqp.BasicReturn{
		ReplyCode:  amqp.NoRoute,
		ReplyText:  "NO_ROUTE",
		Exchange:   m.Header.Exchange,
		RoutingKey: m.Header.RoutingKeys[0],
	}, m.Header.Props, m.Body)
}

// confirmDone confirms publish number seq (0: not in confirm mode).
func (ch *channel) confirmDone(seq uint64, ack, inGroup bool) {
	if seq != 0 {
		ch.confirms.done(seq, ack, inGroup)
	}
}

// commitTx performs a transaction's publishes and settlements (tx.commit)
// as one store operation, and calls done once that is durable: at once if
// it needs no store, with the error if the store failed.
//
// Locking: the publishes are routed first, each under the vhost's read
// lock as publish routes; then every queue the transaction touches (the
// publishes' targets and the queues of the settled deliveries) is locked
// in id order, as a publish locks its targets. The whole transaction is
// built into one txn and handed to the store with all those locks held,
// so the store sees it after every earlier change to those queues and
// before any later one; the locks are released together. Dead-lettered
// copies (rejects, drop-head evictions) have their puts in the same batch
// and enter their target queues afterwards (txn.finish), as for any
// operation.
func (ch *channel) commitTx(pubs []*pendingPublish, acks []txAck, done func(error)) {
	b := ch.conn.b
	var rs []queue.TxPublish
	var qs []*queue.Queue
	for _, p := range pubs {
		if targets := ch.route(p, nil); len(targets) > 0 {
			rs = append(rs, queue.TxPublish{In: &p.Incoming, Queues: targets})
			qs = append(qs, targets...)
		}
	}
	for _, a := range acks {
		for _, d := range a.ds {
			qs = append(qs, d.q)
		}
	}
	if len(qs) == 0 {
		done(nil)
		return
	}
	var settles []queue.TxSettle
	for _, a := range acks {
		forEachQueue(a.ds, func(q *queue.Queue, es []*queue.Entry) {
			settles = append(settles, queue.TxSettle{Queue: q, Entries: es, Action: a.action})
		})
	}
	b.env.Commit(qs, rs, settles, done)
	if len(acks) > 0 {
		ch.kick()
	}
}
