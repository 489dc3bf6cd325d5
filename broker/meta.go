package broker

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/store"
)

// Durable definitions are kept in the store's meta space as JSON records
// under these keys, name parts separated by '\x00' (a byte no client can
// make RabbitMQ accept in a name, and which sorts before every other):
//
//	v/<vhost>
//	x/<vhost>\x00<exchange>
//	q/<vhost>\x00<queue>
//	b/<vhost>\x00<source>\x00<q|x>\x00<dest>\x00<key>\x00<hex(args)>
//
// Argument tables are stored in their AMQP encoding so they come back bit
// for bit.
const (
	metaVHost    = "v/"
	metaExchange = "x/"
	metaQueue    = "q/"
	metaBinding  = "b/"
	// metaQueueIDMark holds the highest queue id ever given to a durable
	// queue, so ids are never reused after a restart even when that queue
	// is gone (its entries could otherwise surface in a new queue).
	metaQueueIDMark = "n/queue-id"
)

func metaKey(prefix string, parts ...string) string {
	return prefix + strings.Join(parts, "\x00")
}

type exchangeDef struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	AutoDelete bool   `json:"auto_delete"`
	Internal   bool   `json:"internal"`
	Args       []byte `json:"args"`
}

type queueDef struct {
	ID         uint64 `json:"id"`
	Name       string `json:"name"`
	AutoDelete bool   `json:"auto_delete"`
	Args       []byte `json:"args"`
}

type bindingDef struct {
	Source   string `json:"source"`
	DestKind string `json:"dest_kind"`
	Dest     string `json:"dest"`
	Key      string `json:"key"`
	Args     []byte `json:"args"`
}

func encodeArgs(t amqp.Table) []byte {
	b, err := amqp.AppendTable(nil, t)
	if err != nil {
		// Tables come from the wire or from our own code; both encode.
		panic(fmt.Sprintf("encode argument table: %v", err))
	}
	return b
}

func decodeArgs(b []byte) (amqp.Table, error) {
	if len(b) == 0 {
		return nil, nil
	}
	t, _, err := amqp.DecodeTable(b)
	return t, err
}

// metaBatch collects definition changes made under a vhost lock, to be
// written after it is released.
type metaBatch struct{ ops []store.MetaOp }

func (m *metaBatch) put(key string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encode definition %q: %v", key, err))
	}
	m.ops = append(m.ops, store.MetaOp{Key: key, Value: b})
}

func (m *metaBatch) del(key string) { m.ops = append(m.ops, store.MetaOp{Key: key}) }

func (m *metaBatch) putVHost(name string) { m.put(metaKey(metaVHost, name), struct{}{}) }

func (m *metaBatch) putExchange(vhost string, x *Exchange) {
	m.put(metaKey(metaExchange, vhost, x.Name), exchangeDef{Name: x.Name, Type: x.Type, AutoDelete: x.AutoDelete, Internal: x.Internal, Args: encodeArgs(x.Args)})
}

func (m *metaBatch) deleteExchange(vhost, name string) { m.del(metaKey(metaExchange, vhost, name)) }

func (m *metaBatch) putQueue(vhost string, q *Queue) {
	m.put(metaKey(metaQueue, vhost, q.Name), queueDef{ID: uint64(q.id), Name: q.Name, AutoDelete: q.AutoDelete, Args: encodeArgs(q.Args)})
}

func (m *metaBatch) deleteQueue(vhost, name string) { m.del(metaKey(metaQueue, vhost, name)) }

func bindingKey(vhost string, b *Binding) string {
	kind := "q"
	if b.exchange != nil {
		kind = "x"
	}
	return metaKey(metaBinding, vhost, b.Source, kind, b.destName(), b.Key, hex.EncodeToString(encodeArgs(b.Args)))
}

func (m *metaBatch) putBinding(vhost string, b *Binding) {
	m.put(bindingKey(vhost, b), bindingDef{Source: b.Source, DestKind: b.destKind(), Dest: b.destName(), Key: b.Key, Args: encodeArgs(b.Args)})
}

func (m *metaBatch) deleteBinding(vhost string, b *Binding) { m.del(bindingKey(vhost, b)) }

// applyMeta writes collected definition changes and waits until they are
// durable: a declare-ok promises the definition survives a restart.
func (b *Broker) applyMeta(m *metaBatch) *amqp.Error {
	if len(m.ops) == 0 {
		return nil
	}
	errc := make(chan error, 1)
	b.store.Apply(&store.Batch{Meta: m.ops}, func(err error) { errc <- err })
	if err := <-errc; err != nil {
		b.storeFailed(err)
		return amqp.Errorf(amqp.InternalError, "store definitions: %s", err)
	}
	return nil
}

// recoverDefinitions rebuilds vhosts, durable exchanges, queues and
// bindings from the store, then each durable queue's entries.
func (b *Broker) recoverDefinitions() error {
	var err error
	scan := func(prefix string, fn func(parts []string, v []byte) error) {
		if err != nil {
			return
		}
		serr := b.store.ScanMeta(prefix, func(k string, v []byte) bool {
			err = fn(strings.Split(strings.TrimPrefix(k, prefix), "\x00"), v)
			return err == nil
		})
		if err == nil {
			err = serr
		}
	}
	scan(metaQueueIDMark, func(_ []string, raw []byte) error {
		var id uint64
		if err := json.Unmarshal(raw, &id); err != nil {
			return fmt.Errorf("decode queue id mark: %w", err)
		}
		if id > b.queueID.Load() {
			b.queueID.Store(id)
		}
		return nil
	})
	scan(metaVHost, func(p []string, _ []byte) error {
		if b.vhosts[p[0]] == nil {
			b.vhosts[p[0]] = newVHost(b, p[0])
		}
		return nil
	})
	scan(metaExchange, func(p []string, raw []byte) error {
		var d exchangeDef
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("decode exchange %q: %w", p, err)
		}
		args, err := decodeArgs(d.Args)
		if err != nil {
			return fmt.Errorf("decode exchange %q arguments: %w", p, err)
		}
		v := b.vhosts[p[0]]
		if v == nil {
			return fmt.Errorf("exchange %q in unknown vhost", p)
		}
		v.exchanges[d.Name] = newExchange(d.Name, d.Type, true, d.AutoDelete, d.Internal, args)
		return nil
	})
	var queues []*Queue
	scan(metaQueue, func(p []string, raw []byte) error {
		var d queueDef
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("decode queue %q: %w", p, err)
		}
		args, err := decodeArgs(d.Args)
		if err != nil {
			return fmt.Errorf("decode queue %q arguments: %w", p, err)
		}
		v := b.vhosts[p[0]]
		if v == nil {
			return fmt.Errorf("queue %q in unknown vhost", p)
		}
		q := newQueue(v, store.QueueID(d.ID), d.Name, true, false, d.AutoDelete, args)
		v.queues[d.Name] = q
		queues = append(queues, q)
		if d.ID > b.queueID.Load() {
			b.queueID.Store(d.ID)
		}
		return nil
	})
	scan(metaBinding, func(p []string, raw []byte) error {
		var d bindingDef
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("decode binding %q: %w", p, err)
		}
		args, err := decodeArgs(d.Args)
		if err != nil {
			return fmt.Errorf("decode binding %q arguments: %w", p, err)
		}
		v := b.vhosts[p[0]]
		if v == nil {
			return fmt.Errorf("binding %q in unknown vhost", p)
		}
		src := v.exchanges[d.Source]
		if src == nil {
			return fmt.Errorf("binding %q from unknown exchange", p)
		}
		bd := &Binding{Source: d.Source, Key: d.Key, Args: args}
		if d.DestKind == "queue" {
			bd.queue = v.queues[d.Dest]
			if bd.queue == nil {
				return fmt.Errorf("binding %q to unknown queue", p)
			}
			bd.queue.bindings = append(bd.queue.bindings, bd)
		} else if bd.exchange = v.exchanges[d.Dest]; bd.exchange == nil {
			return fmt.Errorf("binding %q to unknown exchange", p)
		}
		src.addBinding(bd)
		return nil
	})
	scan(metaPolicy, func(p []string, raw []byte) error {
		var d policyDef
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&d); err != nil {
			return fmt.Errorf("decode policy %q: %w", p, err)
		}
		v := b.vhosts[p[0]]
		if v == nil {
			return fmt.Errorf("policy %q in unknown vhost", p)
		}
		pol := &Policy{Name: p[1], Pattern: d.Pattern, ApplyTo: d.ApplyTo, Priority: d.Priority, Definition: d.Definition}
		if err := validatePolicy(pol); err != nil {
			return fmt.Errorf("stored policy %q: %w", p, err)
		}
		v.policies[pol.Name] = pol
		return nil
	})
	if err != nil {
		return err
	}
	for _, q := range queues {
		if err := b.recoverEntries(q); err != nil {
			return err
		}
	}
	// Policies apply (limits, dead-letter exchanges) and leases start now.
	for _, v := range b.vhosts {
		b.applyPolicies(v)
	}
	for _, q := range queues {
		q.armRecovered()
		q.touch()
	}
	return nil
}

// recoverEntries loads a durable queue's stored entries. They are marked
// redelivered: any of them may have been delivered before the restart.
func (b *Broker) recoverEntries(q *Queue) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.recovering = true
	err := b.store.ScanQueue(q.id, 0, func(se *store.Entry) bool {
		e := &entry{Entry: *se, q: q, redelivered: true, stored: true, prio: propsPriority(se.EffectiveHeader().Props)}
		e.timer.Value = e
		if e.DeadLetter != "" {
			e.state = stBacklog
			q.addBacklogLocked(e)
		} else {
			// A deadline that passed while the broker was down fires
			// at once.
			q.makeReadyLocked(e, true)
		}
		q.seq.Store(se.Seq)
		return true
	})
	if err != nil {
		return fmt.Errorf("recover queue '%s' in vhost '%s': %w", q.Name, q.vhost.Name, err)
	}
	return nil
}
