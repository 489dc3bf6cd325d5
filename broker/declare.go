package broker

import (
	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/policy"
	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/broker/topology"
)

// resolveQueueName expands the empty name to the queue last declared on the
// channel, as AMQP 0-9-1 allows.
func (ch *channel) resolveQueueName(name string) (string, *amqp.Error) {
	if name != "" {
		return name, nil
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.lastQueue == "" {
		return "", amqp.Errorf(amqp.NotFound, "no previously declared queue")
	}
	return ch.lastQueue, nil
}

// readQueue resolves a queue name (empty: the last declared) for an
// operation that reads the queue (consume, get, purge): read permission,
// existence, exclusivity.
func (ch *channel) readQueue(name string) (*queue.Queue, *amqp.Error) {
	name, err := ch.resolveQueueName(name)
	if err != nil {
		return nil, err
	}
	if err := ch.conn.checkPerm(auth.Read, "queue", name); err != nil {
		return nil, err
	}
	return ch.conn.lookupQueue(name)
}

func (ch *channel) exchangeDeclare(m *amqp.ExchangeDeclare) *amqp.Error {
	c := ch.conn
	v := c.vhost
	if m.Passive {
		if m.Exchange == "" {
			return errDefaultExchange()
		}
		v.mu.RLock()
		x := v.topo.Exchanges[m.Exchange]
		v.mu.RUnlock()
		if x == nil {
			return errNoExchange(v.Name, m.Exchange)
		}
		if !m.Nowait {
			ch.out.Send(&amqp.ExchangeDeclareOk{})
		}
		return nil
	}
	if !topology.ValidExchangeType(m.Type) {
		return amqp.Errorf(amqp.CommandInvalid, "unknown exchange type '%s'", m.Type)
	}
	if m.Exchange == "" {
		return errDefaultExchange()
	}
	if err := c.checkPerm(auth.Configure, "exchange", m.Exchange); err != nil {
		return err
	}
	v.mu.Lock()
	x := v.topo.Exchanges[m.Exchange]
	if x != nil {
		err := exchangeEquivalent(v.Name, x, m)
		v.mu.Unlock()
		if err != nil {
			return err
		}
	} else {
		if reservedName(m.Exchange) {
			v.mu.Unlock()
			return amqp.Errorf(amqp.AccessRefused, "exchange name '%s' contains reserved prefix 'amq.*'", m.Exchange)
		}
		if err := c.checkAlternateExchange(m.Exchange, m.Arguments); err != nil {
			v.mu.Unlock()
			return err
		}
		delayed := m.Type == topology.TypeDelayed
		if delayed {
			// As the plugin's validate/1, called for a new exchange only.
			if err := topology.ValidateDelayed(m.Arguments); err != nil {
				v.mu.Unlock()
				return err
			}
		}
		x = topology.NewExchange(m.Exchange, m.Type, m.Durable, m.AutoDelete, m.Internal, m.Arguments)
		x.ApplyPolicy(policy.Sorted(v.policies)) // a policy alternate-exchange applies at once
		if delayed {
			c.b.newHold(v, x, c.b.holdID(x.Durable))
		}
		v.topo.Exchanges[x.Name] = x
		var mb defs.Batch
		if x.Durable {
			mb.Put(defs.EncodeExchange(x.Def(v.Name)))
			if delayed {
				mb.Put(holdRecord(x)) // with its exchange's, in one batch
			}
		}
		w := c.b.startMeta(&mb)
		v.mu.Unlock()
		if err := w.Wait(); err != nil {
			return err
		}
		c.b.retryBacklogs(v) // a dead letter exchange may have appeared
	}
	if !m.Nowait {
		ch.out.Send(&amqp.ExchangeDeclareOk{})
	}
	return nil
}

func exchangeEquivalent(vhost string, x *topology.Exchange, m *amqp.ExchangeDeclare) *amqp.Error {
	ineq := func(key string, got, cur any) *amqp.Error {
		return amqp.Errorf(amqp.PreconditionFailed,
			"inequivalent arg '%s' for exchange '%s' in vhost '%s': received '%v' but current is '%v'",
			key, x.Name, vhost, got, cur)
	}
	switch {
	case x.Type != m.Type:
		return ineq("type", m.Type, x.Type)
	case x.Durable != m.Durable:
		return ineq("durable", m.Durable, x.Durable)
	case x.AutoDelete != m.AutoDelete:
		return ineq("auto_delete", m.AutoDelete, x.AutoDelete)
	case x.Internal != m.Internal:
		return ineq("internal", m.Internal, x.Internal)
	}
	keys := []string{"alternate-exchange"}
	if x.Type == topology.TypeDelayed {
		// Beyond the plugin, which delegates to the underlying type's
		// check and so takes any x-delayed-type on a redeclare.
		keys = append(keys, "x-delayed-type")
	}
	for _, k := range keys {
		got, _ := m.Arguments.Get(k)
		cur, _ := x.Args.Get(k)
		if !queue.SameArg(got, cur) {
			return queue.InequivalentError("exchange", k, x.Name, vhost, got, cur)
		}
	}
	return nil
}

// checkAlternateExchange checks a new exchange's alternate-exchange as
// rabbit_channel does: it must be a longstr, and naming one needs read on
// the new exchange and write on the alternate. A redeclare goes through
// the equivalence check instead.
func (c *conn) checkAlternateExchange(name string, args amqp.Table) *amqp.Error {
	v, ok := args.Get("alternate-exchange")
	if !ok {
		return nil
	}
	ae, ok := v.(string)
	if !ok {
		return amqp.Errorf(amqp.PreconditionFailed, "invalid type '%s' for arg 'alternate-exchange' in exchange '%s' in vhost '%s'",
			amqp.TypeName(v), name, c.vhost.Name)
	}
	if err := c.checkPerm(auth.Read, "exchange", name); err != nil {
		return err
	}
	return c.checkPerm(auth.Write, "exchange", ae)
}

func (ch *channel) exchangeDelete(m *amqp.ExchangeDelete) *amqp.Error {
	c := ch.conn
	v := c.vhost
	if m.Exchange == "" {
		return errDefaultExchange()
	}
	if reservedName(m.Exchange) {
		return amqp.Errorf(amqp.AccessRefused, "deletion of system exchange '%s' in vhost '%s' not allowed", m.Exchange, v.Name)
	}
	if err := c.checkPerm(auth.Configure, "exchange", m.Exchange); err != nil {
		return err
	}
	v.mu.RLock()
	x := v.topo.Exchanges[m.Exchange]
	v.mu.RUnlock()
	if x != nil && x.Hold != nil {
		// With its holding queue, whose lock comes before the vhost's.
		inUse := false
		deleted, w := c.b.deleteDelayed(v, x, func() bool {
			inUse = m.IfUnused && len(x.Bindings) > 0
			return !inUse
		})
		if inUse {
			return amqp.Errorf(amqp.PreconditionFailed, "exchange '%s' in vhost '%s' in use", m.Exchange, v.Name)
		}
		if !deleted && w == nil {
			// Replaced since it was looked up: delete what is there now.
			return ch.exchangeDelete(m)
		}
		if err := w.Wait(); err != nil {
			return err
		}
		if !m.Nowait {
			ch.out.Send(&amqp.ExchangeDeleteOk{})
		}
		return nil
	}
	v.mu.Lock()
	x = v.topo.Exchanges[m.Exchange]
	if x != nil && x.Hold != nil {
		v.mu.Unlock()
		return ch.exchangeDelete(m) // became a delayed exchange meanwhile
	}
	var mb defs.Batch
	if x != nil {
		// As RabbitMQ, only bindings from x count: being the
		// destination of exchange bindings does not make it used.
		if m.IfUnused && len(x.Bindings) > 0 {
			v.mu.Unlock()
			return amqp.Errorf(amqp.PreconditionFailed, "exchange '%s' in vhost '%s' in use", m.Exchange, v.Name)
		}
		v.topo.DeleteExchange(x, &mb)
	}
	w := c.b.startMeta(&mb)
	v.mu.Unlock()
	c.b.deleteUnheld(v)
	if err := w.Wait(); err != nil {
		return err
	}
	if !m.Nowait {
		ch.out.Send(&amqp.ExchangeDeleteOk{})
	}
	return nil
}

// exchangeBind handles exchange.bind and exchange.unbind.
func (ch *channel) exchangeBind(dest, source, key string, args amqp.Table, bind, nowait bool) *amqp.Error {
	c := ch.conn
	v := c.vhost
	// In rabbit_channel's order: write on the destination, then the
	// default exchange refused on either side, then read on the source.
	if err := c.checkPerm(auth.Write, "exchange", dest); err != nil {
		return err
	}
	if dest == "" || source == "" {
		return errDefaultExchange()
	}
	if err := c.checkPerm(auth.Read, "exchange", source); err != nil {
		return err
	}
	v.mu.Lock()
	src, dst := v.topo.Exchanges[source], v.topo.Exchanges[dest]
	if src != nil {
		if err := c.checkTopic(auth.Read, src, key); err != nil {
			v.mu.Unlock()
			return err
		}
	}
	switch {
	case src == nil:
		v.mu.Unlock()
		return errNoExchange(v.Name, source)
	case dst == nil:
		v.mu.Unlock()
		return errNoExchange(v.Name, dest)
	}
	if bind {
		if err := topology.ValidateBinding(src, args); err != nil {
			v.mu.Unlock()
			return err
		}
	}
	var mb defs.Batch
	existing := src.FindBinding(nil, dst, key, args)
	switch {
	case bind && existing == nil:
		b := &topology.Binding{Source: source, Key: key, Args: args, Exchange: dst}
		src.AddBinding(b)
		if src.Durable && dst.Durable {
			mb.Put(defs.EncodeBinding(b.Def(v.Name)))
		}
	case !bind && existing != nil:
		v.topo.RemoveBinding(src, existing, &mb)
	}
	w := c.b.startMeta(&mb)
	v.mu.Unlock()
	if !bind {
		c.b.deleteUnheld(v)
	}
	if err := w.Wait(); err != nil {
		return err
	}
	if bind {
		c.b.retryBacklogs(v) // a route for waiting dead letters may exist now
	}
	if !nowait {
		if bind {
			ch.out.Send(&amqp.ExchangeBindOk{})
		} else {
			ch.out.Send(&amqp.ExchangeUnbindOk{})
		}
	}
	return nil
}

func (ch *channel) queueDeclare(m *amqp.QueueDeclare) *amqp.Error {
	c := ch.conn
	v := c.vhost
	name := m.Queue
	if m.Passive {
		if name == "" {
			var err *amqp.Error
			if name, err = ch.resolveQueueName(""); err != nil {
				return err
			}
		}
		q, err := c.lookupQueue(name)
		if err != nil {
			return err
		}
		ch.declared(q, m.Nowait)
		return nil
	}
	if name == "" {
		name = newGeneratedName("amq.gen-")
	} else if reservedName(name) {
		// Checked first, as rabbit_channel's check_name: before the
		// permission, and for a queue that exists too (a server-named
		// queue cannot be redeclared by its name).
		return amqp.Errorf(amqp.AccessRefused, "queue name '%s' contains reserved prefix 'amq.*'", name)
	}
	if err := c.checkPerm(auth.Configure, "queue", name); err != nil {
		return err
	}
	// The vhost's default queue type applies to the declare as if the
	// client had named it: before the equivalence check and validation.
	dqt := v.defaultQueueType()
	defaulted := false
	if args := queue.WithDefaultType(m.Arguments, dqt, m.Durable, m.Exclusive, m.AutoDelete); len(args) != len(m.Arguments) {
		mm := *m
		mm.Arguments = args
		m = &mm
		defaulted = true
	}
	v.mu.Lock()
	if q := v.topo.Queues[name]; q != nil {
		v.mu.Unlock()
		if q.Exclusive != m.Exclusive || (q.Exclusive && q.Owner != c) {
			return errLocked(v.Name, name)
		}
		if err := queue.Equivalent(v.Name, q, m); err != nil {
			return err
		}
		ch.declared(q, m.Nowait)
		return nil
	}
	// A new queue: the vhost's queue limit first, as rabbit_channel.
	if err := vhostQueueLimitErrorLocked(v, name); err != nil {
		v.mu.Unlock()
		return err
	}
	v.mu.Unlock()
	// A new queue: the dead letter exchange's type and permissions come
	// before the other arguments' validation, as in rabbit_channel.
	if err := c.checkDLXPerms(name, m.Arguments); err != nil {
		return err
	}
	if defaulted && queue.TypeOf(m.Arguments) == policy.QueueStream {
		return amqp.Errorf(amqp.PreconditionFailed, "invalid arg 'x-queue-type' for queue '%s' in vhost '%s': the vhost's default queue type is stream, which brokerd does not support; name x-queue-type classic or quorum, or change the vhost's default", name, v.Name)
	}
	if err := queue.ValidateDeclare(v.Name, name, m); err != nil {
		return err
	}
	if !m.Durable && !m.Exclusive && c.b.opts.DenyTransientNonExclQueues && !c.permitTransient {
		// After the arguments' validation, as rabbit_amqqueue:declare
		// checks it; a queue that exists is declared as before.
		return errTransientNonExcl()
	}
	id := c.b.newQueueID()
	if m.Durable && !m.Exclusive {
		id = c.b.newDurableQueueID()
	}
	q := queue.New(c.b.env, &v.Host, id, name, m.Durable, m.Exclusive, m.AutoDelete, m.Arguments)
	if m.Exclusive {
		q.Owner = c
	}
	v.mu.Lock()
	if other := v.topo.Queues[name]; other != nil {
		// Lost a race with another declare of the same name.
		v.mu.Unlock()
		return ch.queueDeclare(m)
	}
	if err := vhostQueueLimitErrorLocked(v, name); err != nil {
		// Another declare took the last one meanwhile.
		v.mu.Unlock()
		return err
	}
	if p := v.policyForQueueLocked(name, q.Type); p != nil {
		q.InitPolicy(p)
	}
	v.topo.Queues[name] = q
	var mb defs.Batch
	if q.Durable && !q.Exclusive {
		mb.Put(defs.EncodeQueue(q.Def()))
	}
	w := c.b.startMeta(&mb)
	v.mu.Unlock()
	if m.Exclusive {
		c.addExclusive(q)
	}
	if err := w.Wait(); err != nil {
		return err
	}
	if m.Nowait {
		// The x-expires lease starts at creation even when the declare
		// is not answered (RabbitMQ arms it in the queue's init).
		q.Touch()
	}
	c.b.retryBacklogs(v) // the default exchange routes to the new queue
	ch.declared(q, m.Nowait)
	return nil
}

// declared remembers q as the channel's last queue and sends declare-ok.
// A declare that is answered counts as a use of the queue for x-expires
// (B41: RabbitMQ renews the lease only when nowait is false).
func (ch *channel) declared(q *queue.Queue, nowait bool) {
	ch.mu.Lock()
	ch.lastQueue = q.Name
	ch.mu.Unlock()
	if nowait {
		return
	}
	q.Touch()
	messages, consumers := q.DeclareCounts()
	ch.out.Send(&amqp.QueueDeclareOk{Queue: q.Name, MessageCount: uint32(messages), ConsumerCount: uint32(consumers)})
}

// queueBind handles queue.bind and queue.unbind.
func (ch *channel) queueBind(qname, exchange, key string, args amqp.Table, bind, nowait bool) *amqp.Error {
	c := ch.conn
	v := c.vhost
	name, err := ch.resolveQueueName(qname)
	if err != nil {
		return err
	}
	if qname == "" && key == "" {
		// RabbitMQ's shortcut: both empty bind with the queue's name.
		key = name
	}
	// In rabbit_channel's order: write on the queue, then the default
	// exchange refused, then read on the exchange.
	if err := c.checkPerm(auth.Write, "queue", name); err != nil {
		return err
	}
	if exchange == "" {
		return errDefaultExchange()
	}
	if err := c.checkPerm(auth.Read, "exchange", exchange); err != nil {
		return err
	}
	v.mu.Lock()
	q, x := v.topo.Queues[name], v.topo.Exchanges[exchange]
	if x != nil {
		// The topic read check comes before the queue's lookup, as in
		// rabbit_channel's binding_action.
		if err := c.checkTopic(auth.Read, x, key); err != nil {
			v.mu.Unlock()
			return err
		}
	}
	switch {
	case q == nil:
		v.mu.Unlock()
		return queue.NoQueueError(v.Name, name)
	case x == nil:
		v.mu.Unlock()
		return errNoExchange(v.Name, exchange)
	case q.Exclusive && q.Owner != c:
		v.mu.Unlock()
		return errLocked(v.Name, name)
	}
	if bind {
		if err := topology.ValidateBinding(x, args); err != nil {
			v.mu.Unlock()
			return err
		}
	}
	var mb defs.Batch
	existing := x.FindBinding(q, nil, key, args)
	switch {
	case bind && existing == nil:
		b := &topology.Binding{Source: exchange, Key: key, Args: args, Queue: q}
		x.AddBinding(b)
		v.topo.QueueBindings[q] = append(v.topo.QueueBindings[q], b)
		if x.Durable && q.Durable && !q.Exclusive {
			mb.Put(defs.EncodeBinding(b.Def(v.Name)))
		}
	case !bind && existing != nil:
		v.topo.RemoveBinding(x, existing, &mb)
	}
	w := c.b.startMeta(&mb)
	v.mu.Unlock()
	if !bind {
		c.b.deleteUnheld(v)
	}
	if err := w.Wait(); err != nil {
		return err
	}
	if bind {
		c.b.retryBacklogs(v) // a route for waiting dead letters may exist now
	}
	switch {
	case !bind:
		ch.out.Send(&amqp.QueueUnbindOk{})
	case !nowait:
		ch.out.Send(&amqp.QueueBindOk{})
	}
	return nil
}

func (ch *channel) queuePurge(m *amqp.QueuePurge) *amqp.Error {
	q, err := ch.readQueue(m.Queue)
	if err != nil {
		return err
	}
	n, w := q.Purge()
	if err := w.Wait(); err != nil {
		return err
	}
	if !m.Nowait {
		ch.out.Send(&amqp.QueuePurgeOk{MessageCount: uint32(n)})
	}
	return nil
}

func (ch *channel) queueDelete(m *amqp.QueueDelete) *amqp.Error {
	c := ch.conn
	v := c.vhost
	name, err := ch.resolveQueueName(m.Queue)
	if err != nil {
		return err
	}
	if err := c.checkPerm(auth.Configure, "queue", name); err != nil {
		return err
	}
	v.mu.RLock()
	q := v.topo.Queues[name]
	v.mu.RUnlock()
	n := 0
	var own []*queue.Consumer
	if q != nil {
		if q.Exclusive && q.Owner != c {
			return errLocked(v.Name, name)
		}
		if err := q.ClaimForDelete(m.IfUnused, m.IfEmpty); err != nil {
			return err
		}
		var w *queue.StoreWrite
		n, w, own = c.b.deleteQueueFor(q, ch)
		// delete-ok promises the queue does not come back.
		if err := w.Wait(); err != nil {
			ch.cancelConsumers(own)
			return err
		}
	}
	if !m.Nowait {
		ch.out.Send(&amqp.QueueDeleteOk{MessageCount: uint32(n)})
	}
	// This channel's own consumers of q hear of it after delete-ok, as
	// from RabbitMQ (see Broker.deleteQueueFor).
	ch.cancelConsumers(own)
	return nil
}

// cancelConsumers tells the client that each of cs, consumers on ch of a
// queue that is gone, is cancelled.
func (ch *channel) cancelConsumers(cs []*queue.Consumer) {
	for _, c := range cs {
		ch.ServerCancel(c)
	}
}

// transientNonExclDenied is RabbitMQ 4.3's text for a deprecated feature
// denied by default (rabbit_deprecated_features, denied_by_default's
// when_denied), for transient_nonexcl_queues.
const transientNonExclDenied = "Feature `transient_nonexcl_queues` is deprecated.\n" +
	"By default, this feature is not permitted anymore.\n" +
	"The feature will be removed from a future major RabbitMQ version, regardless of the configuration; actual version to be determined.\n" +
	"To continue using this feature when it is not permitted by default, set the following parameter in your configuration:\n" +
	"    \"deprecated_features.permit.transient_nonexcl_queues = true\""

// errTransientNonExcl refuses a new queue neither durable nor exclusive
// as RabbitMQ 4.3 does: a connection error, 541 INTERNAL_ERROR, with the
// deprecation warning cut as rabbit_binary_generator cuts a reply text
// (io_lib:format's chars_limit of 255: the explanation to its first 235
// characters and "..."). brokerd's setting has the same path,
// [deprecated_features.permit] transient_nonexcl_queues.
func errTransientNonExcl() *amqp.Error {
	return amqp.Errorf(amqp.InternalError, "%s...", transientNonExclDenied[:235])
}
