package broker

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/policy"
	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/broker/stats"
	"github.com/brokerd/brokerd/broker/topology"
)

// What the management API shows of the broker: snapshots of queues,
// exchanges, bindings, connections and channels. Each is read under the
// locks of what it describes, one object at a time, so a listing is not
// one atomic picture of the broker (nor is RabbitMQ's).

// QueueInfo describes a queue.
type QueueInfo struct {
	VHost, Name                    string
	Durable, AutoDelete, Exclusive bool
	Arguments                      amqp.Table
	Type                           string // classic, quorum
	// Policy and OperatorPolicy name the policies applied ("" if none);
	// EffectivePolicyDefinition is their merged definition (nil if none).
	Policy, OperatorPolicy    string
	EffectivePolicyDefinition map[string]any
	// Ready and Unacked count messages ready for delivery and delivered
	// but not settled; DeadLetterBacklog the dead letters waiting for a
	// route (at-least-once), which count as messages too.
	Ready, Unacked, DeadLetterBacklog int
	// Delayed counts the messages waiting out a retry delay (delayed
	// retry): messages, neither ready nor unacknowledged (RabbitMQ 4.3's
	// messages_delayed).
	Delayed int
	// ReadyBytes and UnackedBytes are body bytes, as RabbitMQ's classic
	// queues count message_bytes (and x-max-length-bytes counts).
	ReadyBytes, UnackedBytes int64
	Consumers                int
	// HeadTimestamp is the timestamp property (seconds since the Unix
	// epoch) of the classic queue's next message when it is resident,
	// nil otherwise and for quorum queues (RabbitMQ's
	// head_message_timestamp).
	HeadTimestamp *uint64
	// ExclusiveOwner names the connection owning an exclusive queue.
	ExclusiveOwner string
	// DeadLettered counts messages dead-lettered from the queue to at
	// least one target, by reason.
	DeadLettered map[string]uint64
	// Damaged counts messages the queue lost to damaged data on disk
	// since it was created (or recovered).
	Damaged uint64
	// MessageStats counts what clients did with the queue's messages
	// since it was created (or recovered: they are not stored).
	MessageStats QueueMessageStats
	// Memory is the bytes of messages the queue holds in memory: bodies
	// and properties of its resident ready messages (its page windows)
	// and of its deliveries not yet settled. Unlike the byte counts it
	// includes properties, which can be far larger than bodies, and
	// leaves out what only the store holds.
	Memory int64
}

// QueueMessageStats are a queue's message counters under RabbitMQ's
// names (its queue message_stats): messages a publish put into the
// queue; deliveries by consume with and without acknowledgement, by
// basic.get with and without; basic.gets answered get-empty; deliveries
// flagged redelivered; deliveries settled by basic.ack. Each is read on
// its own, so a snapshot is not one instant across counters.
type QueueMessageStats struct {
	Publish, Deliver, DeliverNoAck, Get, GetNoAck, GetEmpty, Redeliver, Ack uint64
}

// DeliverGet is RabbitMQ's deliver_get: every delivery, by consume or
// basic.get, acknowledged or not.
func (s QueueMessageStats) DeliverGet() uint64 {
	return s.Deliver + s.DeliverNoAck + s.Get + s.GetNoAck
}

// Messages is what RabbitMQ calls a queue's depth: ready, unacknowledged,
// delayed and waiting dead letters.
func (qi *QueueInfo) Messages() int { return qi.Ready + qi.Unacked + qi.DeadLetterBacklog + qi.Delayed }

// Queues describes the queues of vhost ("" for every vhost), sorted by
// vhost and name.
func (b *Broker) Queues(vhost string) []QueueInfo {
	unacked := b.unackedBytes()
	var out []QueueInfo
	for _, v := range b.vhostsNamed(vhost) {
		v.mu.RLock()
		qs := slices.Collect(maps.Values(v.topo.Queues))
		v.mu.RUnlock()
		for _, q := range qs {
			out = append(out, queueInfo(q, unacked))
		}
	}
	slices.SortFunc(out, func(a, b QueueInfo) int {
		return cmp.Or(cmp.Compare(a.VHost, b.VHost), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// Queue describes one queue; the error wraps ErrNotFound when the vhost or
// the queue does not exist.
func (b *Broker) Queue(vhost, name string) (QueueInfo, error) {
	v := b.VHost(vhost)
	if v == nil {
		return QueueInfo{}, notFoundf("no vhost '%s'", vhost)
	}
	v.mu.RLock()
	q := v.topo.Queues[name]
	v.mu.RUnlock()
	if q == nil {
		return QueueInfo{}, notFoundf("no queue '%s' in vhost '%s'", name, vhost)
	}
	return queueInfo(q, b.unackedBytes()), nil
}

func queueInfo(q *queue.Queue, unacked map[*queue.Queue]unackedSize) QueueInfo {
	u := unacked[q]
	qi := QueueInfo{
		VHost: q.Host.Name, Name: q.Name, Durable: q.Durable, AutoDelete: q.AutoDelete, Exclusive: q.Exclusive,
		Arguments: q.Args, Type: q.Type, UnackedBytes: u.body, Memory: u.resident,
		DeadLettered: map[string]uint64{},
	}
	cfg := q.Settings()
	qi.Policy, qi.OperatorPolicy, qi.EffectivePolicyDefinition = cfg.Policy, cfg.OpPolicy, maps.Clone(cfg.Effective)
	if q.Owner != nil {
		qi.ExclusiveOwner = q.Owner.(*conn).name()
	}
	l := q.Lengths()
	qi.Ready, qi.ReadyBytes = l.Ready, l.ReadyBytes
	qi.Memory += l.Resident
	qi.Unacked, qi.DeadLetterBacklog, qi.Consumers, qi.Delayed = l.Unacked, l.Backlog, l.Consumers, l.Delayed
	for i, r := range stats.Reasons {
		qi.DeadLettered[string(r)] = q.Stats.DeadLettered[i].Load()
	}
	qi.Damaged = q.Stats.Damaged.Load()
	qi.MessageStats = queueMessageStats(q)
	if q.Type != policy.QueueQuorum {
		if ts, ok := q.HeadTimestamp(); ok {
			qi.HeadTimestamp = &ts
		}
	}
	return qi
}

// unackedSize is what a queue's deliveries not yet settled hold: body
// bytes, and resident bytes (bodies and properties, EntryResident).
type unackedSize struct{ body, resident int64 }

// unackedBytes sums the deliveries not yet settled, by queue, over every
// connection's channels.
func (b *Broker) unackedBytes() map[*queue.Queue]unackedSize {
	out := map[*queue.Queue]unackedSize{}
	for _, c := range b.connList() {
		for _, ch := range c.channelList() {
			ch.mu.Lock()
			for _, d := range ch.unacked[ch.unackedHead:] {
				if d != nil {
					u := out[d.q]
					u.body += int64(d.e.BodySize())
					u.resident += d.e.EntryResident()
					out[d.q] = u
				}
			}
			ch.mu.Unlock()
		}
	}
	return out
}

// ExchangeInfo describes an exchange.
type ExchangeInfo struct {
	VHost, Name, Type             string
	Durable, AutoDelete, Internal bool
	Arguments                     amqp.Table
	Policy                        string // the policy applied, "" if none
	// PublishIn counts messages clients published into the exchange,
	// routed or not; PublishOut the queue copies it routed them to
	// (RabbitMQ's publish_in and publish_out), since it was declared or
	// recovered.
	PublishIn, PublishOut uint64
	// Delayed is set for a delayed exchange (x-delayed-message);
	// MessagesDelayed counts the messages it holds until they are due
	// (the plugin's messages_delayed).
	Delayed         bool
	MessagesDelayed int64
}

// Exchanges describes the exchanges of vhost ("" for every vhost), sorted
// by vhost and name; the default exchange is named "".
func (b *Broker) Exchanges(vhost string) []ExchangeInfo {
	var out []ExchangeInfo
	for _, v := range b.vhostsNamed(vhost) {
		v.mu.RLock()
		ps := policy.Sorted(v.policies)
		for _, x := range v.topo.Exchanges {
			out = append(out, exchangeInfoLocked(x, v, ps))
		}
		v.mu.RUnlock()
	}
	slices.SortFunc(out, func(a, b ExchangeInfo) int {
		return cmp.Or(cmp.Compare(a.VHost, b.VHost), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// Exchange describes one exchange; the error wraps ErrNotFound when the
// vhost or the exchange does not exist.
func (b *Broker) Exchange(vhost, name string) (ExchangeInfo, error) {
	v := b.VHost(vhost)
	if v == nil {
		return ExchangeInfo{}, notFoundf("no vhost '%s'", vhost)
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	x := v.topo.Exchanges[name]
	if x == nil {
		return ExchangeInfo{}, notFoundf("no exchange '%s' in vhost '%s'", name, vhost)
	}
	return exchangeInfoLocked(x, v, policy.Sorted(v.policies)), nil
}

func exchangeInfoLocked(x *topology.Exchange, v *VHost, ps []*Policy) ExchangeInfo {
	xi := ExchangeInfo{VHost: v.Name, Name: x.Name, Type: x.Type, Durable: x.Durable, AutoDelete: x.AutoDelete, Internal: x.Internal, Arguments: x.Args,
		PublishIn: x.Stats.PublishIn.Load(), PublishOut: x.Stats.PublishOut.Load()}
	if x.Hold != nil {
		xi.Delayed, xi.MessagesDelayed = true, x.Hold.Held()
	}
	if x.Name != "" {
		if p := policy.Best(ps, func(p *Policy) bool { return p.AppliesToExchange(x.Name) }); p != nil {
			xi.Policy = p.Name
		}
	}
	return xi
}

// BindingInfo describes a binding. The default exchange's implicit
// bindings (every queue by its name) are listed too, as RabbitMQ does,
// with Source "".
type BindingInfo struct {
	VHost, Source, Destination string
	// DestinationType is "queue" or "exchange".
	DestinationType string
	RoutingKey      string
	Arguments       amqp.Table
}

// PropertiesKey is RabbitMQ's name for a binding within its source and
// destination in the HTTP API (rabbit_mgmt_format:pack_binding_props):
// "~" for an empty routing key without arguments, the quoted routing key
// (QuoteBindingKey) without arguments, and otherwise the quoted routing
// key, "~" and a hash of the arguments. Quoting keeps "~" out of the key,
// so no two bindings of a source and destination share a properties key.
func (bi *BindingInfo) PropertiesKey() string {
	if len(bi.Arguments) == 0 {
		if bi.RoutingKey == "" {
			return "~"
		}
		return QuoteBindingKey(bi.RoutingKey)
	}
	return QuoteBindingKey(bi.RoutingKey) + "~" + ArgsHash(bi.Arguments)
}

// QuoteBindingKey quotes a routing key for a properties key as RabbitMQ
// does (mochiweb's quote_plus, then "~" as %7E): letters, digits and
// ".-_" stay, a space becomes "+", every other byte %XX (upper case).
func QuoteBindingKey(key string) string {
	const hex = "0123456789ABCDEF"
	var sb strings.Builder
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '_':
			sb.WriteByte(c)
		case c == ' ':
			sb.WriteByte('+')
		default:
			sb.WriteByte('%')
			sb.WriteByte(hex[c>>4])
			sb.WriteByte(hex[c&15])
		}
	}
	return sb.String()
}

// ArgsHash names an argument table in a properties key: a stable hash of
// its AMQP encoding, URL-safe. (RabbitMQ hashes the Erlang term instead,
// so the two brokers' keys for bindings with arguments differ.)
func ArgsHash(t amqp.Table) string { return argsHash(t) }

// argsHash names an argument table in a properties key: a stable hash of
// its AMQP encoding, URL-safe.
func argsHash(t amqp.Table) string {
	var h uint64 = 14695981039346656037 // FNV-1a
	for _, c := range defs.EncodeArgs(t) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return strconv.FormatUint(h, 36)
}

// Bindings describes the bindings of vhost ("" for every vhost): per
// vhost, the default exchange's implicit ones first (by queue name), then
// by source, destination and routing key.
func (b *Broker) Bindings(vhost string) []BindingInfo {
	var out []BindingInfo
	for _, v := range b.vhostsNamed(vhost) {
		var implicit, explicit []BindingInfo
		v.mu.RLock()
		for _, q := range v.topo.Queues {
			implicit = append(implicit, BindingInfo{VHost: v.Name, Destination: q.Name, DestinationType: "queue", RoutingKey: q.Name, Arguments: amqp.Table{}})
		}
		for _, x := range v.topo.Exchanges {
			for _, bd := range x.Bindings {
				bi := BindingInfo{VHost: v.Name, Source: x.Name, Destination: bd.DestName(), DestinationType: "queue", RoutingKey: bd.Key, Arguments: bd.Args}
				if bd.Queue == nil {
					bi.DestinationType = "exchange"
				}
				explicit = append(explicit, bi)
			}
		}
		v.mu.RUnlock()
		byDest := func(a, b BindingInfo) int {
			return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.DestinationType, b.DestinationType),
				cmp.Compare(a.Destination, b.Destination), cmp.Compare(a.RoutingKey, b.RoutingKey))
		}
		slices.SortStableFunc(implicit, byDest)
		slices.SortStableFunc(explicit, byDest)
		out = append(append(out, implicit...), explicit...)
	}
	return out
}

// ConnectionInfo describes a client connection.
type ConnectionInfo struct {
	// Name is RabbitMQ's: "peer-host:peer-port -> host:port".
	Name             string
	VHost, User      string
	Peer, Local      net.Addr
	ClientProperties amqp.Table
	Channels         int
	ConnectedAt      time.Time
	Tuning           amqp.Tuning
	// RecvOct and SendOct count the bytes received and sent, RecvCnt and
	// SendCnt the reads and writes that moved them (RabbitMQ's recv_oct,
	// recv_cnt, send_oct, send_cnt).
	RecvOct, RecvCnt, SendOct, SendCnt uint64
	// Internal: the broker's own connection (a shovel's side on this
	// broker: LocalConnector), RabbitMQ's direct connection.
	Internal bool
}

// Connections describes the open client connections of vhost ("" for
// every vhost), sorted by name.
func (b *Broker) Connections(vhost string) []ConnectionInfo {
	var out []ConnectionInfo
	for _, c := range b.connList() {
		if vhost != "" && c.vhost.Name != vhost {
			continue
		}
		out = append(out, c.info())
	}
	slices.SortFunc(out, func(a, b ConnectionInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Connection describes one connection by name; the error wraps
// ErrNotFound when there is none.
func (b *Broker) Connection(name string) (ConnectionInfo, error) {
	if c := b.connNamed(name); c != nil {
		return c.info(), nil
	}
	return ConnectionInfo{}, notFoundf("no connection '%s'", name)
}

// CloseConnection closes the named connection with 320 CONNECTION_FORCED
// and reason as the reply text, as RabbitMQ's management API does. The
// error wraps ErrNotFound when there is no such connection.
func (b *Broker) CloseConnection(name, reason string) error {
	c := b.connNamed(name)
	if c == nil {
		return notFoundf("no connection '%s'", name)
	}
	c.ac.Close(amqp.Errorf(amqp.ConnectionForced, "%s", reason))
	return nil
}

func (c *conn) info() ConnectionInfo {
	ci := ConnectionInfo{
		Name: c.name(), VHost: c.vhost.Name, User: c.userName,
		Peer: c.ac.RemoteAddr(), Local: c.ac.LocalAddr(), ClientProperties: c.ac.ClientProperties(),
		Channels: len(c.channelList()), ConnectedAt: c.opened, Tuning: c.ac.Tuning(),
		Internal: c.internal,
	}
	ci.RecvOct, ci.RecvCnt, ci.SendOct, ci.SendCnt = c.ac.Traffic()
	return ci
}

// name is the connection's name as RabbitMQ gives it.
func (c *conn) name() string {
	if c.ac == nil {
		return "direct"
	}
	return fmt.Sprintf("%s -> %s", c.ac.RemoteAddr(), c.ac.LocalAddr())
}

// ChannelInfo describes a channel of a client connection.
type ChannelInfo struct {
	// Name is RabbitMQ's: the connection's name and " (number)".
	Name, Connection string
	Number           uint16
	VHost, User      string
	Consumers        int
	Unacked          int
	Prefetch         int // per consumer (basic.qos global=false)
	GlobalPrefetch   int
	Confirm, Tx      bool
	// NextPublishSeq is the sequence number the next publish gets in
	// confirm mode.
	NextPublishSeq uint64
	// Uncommitted and AcksUncommitted count the publishes and the acks
	// waiting for tx.commit.
	Uncommitted, AcksUncommitted int
	Flow                         bool // channel.flow active
	// Published, Confirmed, ReturnUnroutable and DropUnroutable count the
	// channel's publishes, the confirms sent for them and the unroutable
	// ones returned or dropped (RabbitMQ's channel message_stats
	// publish, confirm, return_unroutable, drop_unroutable).
	Published, Confirmed, ReturnUnroutable, DropUnroutable uint64
	// Deliveries counts its deliveries, basic.get answers and acks as a
	// queue's are counted (Publish unused).
	Deliveries QueueMessageStats
}

// Channels describes the channels of every client connection of vhost
// ("" for every vhost), sorted by name.
func (b *Broker) Channels(vhost string) []ChannelInfo {
	var out []ChannelInfo
	for _, c := range b.connList() {
		if vhost != "" && c.vhost.Name != vhost {
			continue
		}
		cn := c.name()
		for _, ch := range c.channelList() {
			ch.mu.Lock()
			out = append(out, ChannelInfo{
				Name: fmt.Sprintf("%s (%d)", cn, ch.id), Connection: cn, Number: ch.id,
				VHost: c.vhost.Name, User: c.userName, Consumers: len(ch.consumers), Unacked: ch.unackedN,
				Prefetch: ch.prefetch, GlobalPrefetch: ch.globalPrefetch, Confirm: ch.confirm, Tx: ch.tx,
				NextPublishSeq: ch.publishSeq + 1, Flow: ch.flowActive,
				Uncommitted: len(ch.txPubs), AcksUncommitted: txAckCount(ch.txAcks),
				Deliveries: consumptionStats(&ch.deliveryStats),
			})
			ch.mu.Unlock()
			cs, ci := &ch.confirms.stats, &out[len(out)-1]
			ci.Published, ci.Confirmed, ci.ReturnUnroutable, ci.DropUnroutable = cs.Publish.Load(), cs.Confirm.Load(), cs.Returned.Load(), cs.Dropped.Load()
		}
	}
	slices.SortFunc(out, func(a, b ChannelInfo) int {
		return cmp.Or(cmp.Compare(a.Connection, b.Connection), cmp.Compare(a.Number, b.Number))
	})
	return out
}

// ConsumerInfo describes a consumer.
type ConsumerInfo struct {
	VHost, Queue, Tag string
	Channel           string // the channel's name
	NoAck, Exclusive  bool
	Prefetch          int
	Priority          int64
}

// Consumers describes the consumers of vhost ("" for every vhost).
func (b *Broker) Consumers(vhost string) []ConsumerInfo {
	var out []ConsumerInfo
	for _, c := range b.connList() {
		if vhost != "" && c.vhost.Name != vhost {
			continue
		}
		cn := c.name()
		for _, ch := range c.channelList() {
			ch.mu.Lock()
			for _, cs := range ch.consumers {
				out = append(out, ConsumerInfo{VHost: c.vhost.Name, Queue: cs.Queue.Name, Tag: cs.Tag,
					Channel: fmt.Sprintf("%s (%d)", cn, ch.id), NoAck: cs.NoAck, Exclusive: cs.Exclusive,
					Prefetch: cs.Prefetch, Priority: cs.Priority})
			}
			ch.mu.Unlock()
		}
	}
	slices.SortFunc(out, func(a, b ConsumerInfo) int {
		return cmp.Or(cmp.Compare(a.VHost, b.VHost), cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Tag, b.Tag))
	})
	return out
}

// vhostsNamed returns the named vhost, or every vhost for "".
func (b *Broker) vhostsNamed(name string) []*VHost {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if name != "" {
		if v := b.vhosts[name]; v != nil {
			return []*VHost{v}
		}
		return nil
	}
	return slices.Collect(maps.Values(b.vhosts))
}

func (b *Broker) connList() []*conn {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return slices.Collect(maps.Keys(b.conns))
}

func (b *Broker) connNamed(name string) *conn {
	for _, c := range b.connList() {
		if c.name() == name {
			return c
		}
	}
	return nil
}

func (c *conn) channelList() []*channel {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Collect(maps.Values(c.channels))
}

func txAckCount(acks []txAck) int {
	n := 0
	for _, a := range acks {
		n += len(a.ds)
	}
	return n
}
