package queue

import (
	"fmt"
	"slices"

	"github.com/brokerd/brokerd/store"
)

// Peek bounds: a peek never returns more than PeekMaxCount messages, nor
// (beyond its first message) more than PeekMaxBytes of bodies.
const (
	PeekMaxCount = 1000
	PeekMaxBytes = 16 << 20
)

// PeekedMessage is one ready message of a queue as Peek sees it. Its
// byte slices are the broker's own (immutable) copies: callers must not
// modify them.
type PeekedMessage struct {
	Seq         uint64 // the entry's position in its queue
	Exchange    string
	RoutingKeys []string
	Props       []byte // raw content-header property list
	Body        []byte
	Redelivered bool
	Priority    uint8
	// DeliveryCount is how many times it was returned to the queue.
	DeliveryCount uint32
}

// peekPart is one stretch of a level in delivery order, planned under the
// queue's lock: resident messages (copied) or a middle to read.
type peekPart struct {
	resident []PeekedMessage
	mid      bool
	prio     uint8
	from, to uint64
}

// planPeek lists, under q's lock, the stretches of its ready list in
// delivery order from seq from (on every level, or with level >= 0 from
// seq from of that level, lower levels whole), until they hold at least want messages:
// resident messages copied, middles as seq ranges to read. It reports
// false if q was deleted. spilled and marks are what the reads need
// (q.spilled, q.recMarks as they are now).
func (q *Queue) planPeek(level int, from uint64, want int) (parts []peekPart, spilled bool, marks []uint64, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.isDeleted() {
		return nil, false, nil, false
	}
	n := 0
	resident := func(d interface {
		Len() int
		At(int) *Entry
	}) {
		var ms []PeekedMessage
		for i := 0; i < d.Len() && n < want; i++ {
			e := d.At(i)
			if e.Ready() && e.Seq >= from {
				ms = append(ms, peeked(&e.Entry, e.prio, e.Redelivered))
				n++
			}
		}
		if len(ms) > 0 {
			parts = append(parts, peekPart{resident: ms})
		}
	}
	all := from
	for i := q.ready.Levels() - 1; i >= 0 && n < want; i-- {
		l := q.ready.Level(uint8(i))
		if level >= 0 {
			switch p := int(l.Prio); {
			case p > level:
				continue // before the start in delivery order
			case p == level:
				from = all
			default:
				from = 0
			}
		}
		resident(&l.Head)
		if l.Mid.N > 0 && l.Mid.To >= from && n < want {
			parts = append(parts, peekPart{mid: true, prio: l.Prio, from: max(from, l.Mid.From), to: l.Mid.To})
			if from <= l.Mid.From {
				n += l.Mid.N // at most this many: the read may find fewer
			} // else how many lie above from is unknown: plan on
		}
		if n < want {
			resident(&l.Tail)
		}
	}
	return parts, q.spilled, slices.Clone(q.recMarks), true
}

// peeked describes entry e (its own header if dead-lettered).
func peeked(e *store.Entry, prio uint8, redelivered bool) PeekedMessage {
	h := e.EffectiveHeader()
	return PeekedMessage{
		Seq: e.Seq, Exchange: h.Exchange, RoutingKeys: h.RoutingKeys, Props: h.Props, Body: e.Msg.Body,
		Redelivered: redelivered, Priority: prio, DeliveryCount: e.DeliveryCount,
	}
}

// Peek is Broker.Peek (level < 0) and PeekLevel on q. It reports false if
// q was deleted. Resident messages are copied under q's lock; paged ones
// are read from the store after it is released.
func (q *Queue) Peek(level int, from uint64, count int) ([]PeekedMessage, bool, error) {
	want := max(min(count, PeekMaxCount), 0)

	parts, spilled, marks, ok := q.planPeek(level, from, want)
	if !ok {
		return nil, false, nil
	}
	var out []PeekedMessage
	var bytes int64
	full := func() bool {
		return len(out) >= want || len(out) > 0 && bytes >= PeekMaxBytes
	}
	add := func(m PeekedMessage) {
		out = append(out, m)
		bytes += int64(len(m.Body))
	}
	rg := q.ranges()
	for _, p := range parts {
		if !p.mid {
			for _, m := range p.resident {
				if full() {
					break
				}
				add(m)
			}
			continue
		}
		for pos := p.from; !full() && pos <= p.to; {
			r, err := rg.ReadMiddle(spilled, p.prio, pos, p.to, want-len(out), max(PeekMaxBytes-bytes, 1), 0, nil)
			if err != nil {
				return nil, true, fmt.Errorf("peek queue '%s' in vhost '%s': read paged messages: %w", q.Name, q.Host.Name, err)
			}
			for i := range r.Metas {
				m := &r.Metas[i]
				pos = m.Seq + 1
				if m.DeadLetter != "" || full() {
					continue // waiting in the dead-letter backlog: not ready
				}
				e := store.Entry{Ref: m.Ref, Msg: r.Msgs[i], Header: m.Header}
				redelivered := m.DeliveryCount > 0 || int(m.Prio) < len(marks) && m.Seq <= marks[m.Prio]
				add(peeked(&e, m.Prio, redelivered))
			}
			if r.Done || len(r.Metas) == 0 {
				break
			}
		}
		if full() {
			break
		}
	}
	return out, true, nil
}
