package broker

import (
	"fmt"
	"math"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/queue"
)

// Browsing and cancelling the messages a delayed exchange holds (its
// holding queue: delayed.go; the engine's side is broker/queue's
// scheduled.go). A message's id is its seq in the holding queue: stable
// while it is held, across restarts too.

// ScheduledMessage is one message a delayed exchange holds
// (queue.ScheduledMessage): its seq (the id Cancel takes), its due time in
// Unix ms, its routing keys, properties and body.
type ScheduledMessage = queue.ScheduledMessage

// ScheduledPos is a position in due-time order (queue.ScheduledPos): a
// page starts after it; the zero value is the start.
type ScheduledPos = queue.ScheduledPos

// ScheduledFilter says which held messages CancelScheduledMatching
// cancels: those that pass every filter set. All must be set for a filter
// with nothing else set: an empty filter is refused rather than taken to
// mean everything.
type ScheduledFilter struct {
	All bool
	// RoutingKey, if set, must equal the message's routing key (the one
	// it was published with).
	RoutingKey *string
	// Headers must each be among the message's headers with this value,
	// compared as text (a string's or byte array's bytes, a number's
	// decimal form, true/false).
	Headers map[string]string
	// DueBefore (exclusive) and DueAfter (exclusive), in Unix ms, bound
	// the due time when non-zero.
	DueBefore, DueAfter int64
}

// empty reports whether f sets no filter.
func (f *ScheduledFilter) empty() bool {
	return f.RoutingKey == nil && len(f.Headers) == 0 && f.DueBefore == 0 && f.DueAfter == 0
}

// match reports whether m passes f's filters other than the due times.
func (f *ScheduledFilter) match(m *ScheduledMessage) bool {
	if f.RoutingKey != nil && (len(m.RoutingKeys) == 0 || m.RoutingKeys[0] != *f.RoutingKey) {
		return false
	}
	if len(f.Headers) == 0 {
		return true
	}
	props, err := amqp.DecodeProperties(m.Props)
	if err != nil {
		return false
	}
	for k, want := range f.Headers {
		v, ok := props.Headers.Get(k)
		if !ok || headerText(v) != want {
			return false
		}
	}
	return true
}

// headerText is a header value as ScheduledFilter.Headers compares it.
func headerText(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	}
	return fmt.Sprint(v)
}

// holdOf returns the holding queue of delayed exchange exchange of vhost.
// The error wraps ErrNotFound for an unknown vhost or exchange, and is an
// InvalidError for an exchange that is not a delayed one.
func (b *Broker) holdOf(vhost, exchange string) (*queue.Queue, error) {
	v := b.VHost(vhost)
	if v == nil {
		return nil, notFoundf("no vhost '%s'", vhost)
	}
	v.mu.RLock()
	x := v.topo.Exchanges[exchange]
	v.mu.RUnlock()
	if x == nil {
		return nil, notFoundf("no exchange '%s' in vhost '%s'", exchange, vhost)
	}
	if x.Hold == nil {
		return nil, invalidf("exchange '%s' in vhost '%s' is not a delayed exchange (x-delayed-message)", exchange, vhost)
	}
	return x.Hold, nil
}

// Scheduled returns up to count (at most PeekMaxCount) of the messages
// delayed exchange exchange of vhost holds, in due-time order then seq
// order, from the first after position after, and beyond the first no
// more than PeekMaxBytes of bodies; the next page starts after the last
// one's position (ScheduledMessage.Pos). Nothing changes. Resident
// messages are copied under the holding queue's lock and paged ones read
// after (queue.Queue.Scheduled): a message released or cancelled
// meanwhile may still be listed.
func (b *Broker) Scheduled(vhost, exchange string, after ScheduledPos, count int) ([]ScheduledMessage, error) {
	q, err := b.holdOf(vhost, exchange)
	if err != nil {
		return nil, err
	}
	ms, ok, err := q.Scheduled(after, count)
	if !ok {
		return nil, notFoundf("no exchange '%s' in vhost '%s'", exchange, vhost)
	}
	return ms, err
}

// CancelScheduled cancels the messages of delayed exchange exchange of
// vhost whose ids (seqs) are ids: they are taken out, never routed, and
// their deletes are durable when it returns. It returns the ids it
// cancelled, sorted: an id already released, cancelled or never held is
// left out. A message is released or cancelled, never both.
func (b *Broker) CancelScheduled(vhost, exchange string, ids []uint64) ([]uint64, error) {
	q, err := b.holdOf(vhost, exchange)
	if err != nil {
		return nil, err
	}
	done, wait, ok, err := q.Cancel(ids)
	if werr := wait(); err == nil {
		err = werr
	}
	if !ok {
		return nil, notFoundf("no exchange '%s' in vhost '%s'", exchange, vhost)
	}
	b.env.Counters.DelayedCancelled.Add(uint64(len(done)))
	return done, err
}

// CancelScheduledMatching cancels the messages of delayed exchange
// exchange of vhost that pass filter f, as CancelScheduled does, and
// returns how many it cancelled. It walks the held messages in due-time
// order a page at a time (from DueAfter, up to DueBefore), cancelling each
// page's matches before it reads the next: a message scheduled while it
// runs may be left. An empty filter without All is refused.
func (b *Broker) CancelScheduledMatching(vhost, exchange string, f ScheduledFilter) (int, error) {
	if f.empty() && !f.All {
		return 0, invalidf("a cancel by filter needs a filter (routing_key, headers, due_before, due_after) or all")
	}
	if f.DueBefore != 0 && f.DueAfter != 0 && f.DueBefore <= f.DueAfter+1 {
		return 0, nil // no millisecond lies between them
	}
	q, err := b.holdOf(vhost, exchange)
	if err != nil {
		return 0, err
	}
	pos := ScheduledPos{}
	if f.DueAfter != 0 {
		pos = ScheduledPos{Due: f.DueAfter, Seq: math.MaxUint64}
	}
	var waits []func() error
	n := 0
	gone := func() error { return notFoundf("no exchange '%s' in vhost '%s'", exchange, vhost) }
	for {
		page, ok, err := q.Scheduled(pos, PeekMaxCount)
		if !ok {
			return n, gone()
		}
		if err != nil {
			return n, err
		}
		if len(page) == 0 {
			break
		}
		var ids []uint64
		end := false
		for i := range page {
			m := &page[i]
			if f.DueBefore != 0 && m.Due >= f.DueBefore {
				end = true
				break
			}
			if f.match(m) {
				ids = append(ids, m.Seq)
			}
		}
		pos = page[len(page)-1].Pos()
		if len(ids) > 0 {
			done, wait, ok, err := q.Cancel(ids)
			waits = append(waits, wait)
			n += len(done)
			b.env.Counters.DelayedCancelled.Add(uint64(len(done)))
			if !ok {
				return n, gone()
			}
			if err != nil {
				return n, err
			}
		}
		if end {
			break
		}
	}
	for _, w := range waits {
		if err := w(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// Scheduled is Broker.Scheduled as this Direct's user may do it: read
// access to the exchange (as a peek needs read on its queue), in the
// Direct's vhost.
func (d *Direct) Scheduled(exchange string, after ScheduledPos, count int) ([]ScheduledMessage, error) {
	if aerr := d.c.checkPerm(auth.Read, "exchange", exchange); aerr != nil {
		return nil, aerr
	}
	return d.c.b.Scheduled(d.c.vhost.Name, exchange, after, count)
}

// checkCancel checks that the Direct's user may cancel what exchange
// holds: read access to it, as a purge needs on a queue, and write access,
// as publishing into it needs.
func (d *Direct) checkCancel(exchange string) error {
	if aerr := d.c.checkPerm(auth.Read, "exchange", exchange); aerr != nil {
		return aerr
	}
	if aerr := d.c.checkPerm(auth.Write, "exchange", exchange); aerr != nil {
		return aerr
	}
	return nil
}

// CancelScheduled is Broker.CancelScheduled as this Direct's user may do
// it (checkCancel).
func (d *Direct) CancelScheduled(exchange string, ids []uint64) ([]uint64, error) {
	if err := d.checkCancel(exchange); err != nil {
		return nil, err
	}
	return d.c.b.CancelScheduled(d.c.vhost.Name, exchange, ids)
}

// CancelScheduledMatching is Broker.CancelScheduledMatching as this
// Direct's user may do it (checkCancel).
func (d *Direct) CancelScheduledMatching(exchange string, f ScheduledFilter) (int, error) {
	if err := d.checkCancel(exchange); err != nil {
		return 0, err
	}
	return d.c.b.CancelScheduledMatching(d.c.vhost.Name, exchange, f)
}

// Now is the broker's clock (Options.Now): what due times count from.
func (b *Broker) Now() time.Time { return b.env.Now() }
