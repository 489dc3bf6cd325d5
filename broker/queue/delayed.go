package queue

import (
	"cmp"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/internal/ratelog"
	"github.com/brokerd/brokerd/store"
)

// Scheduled delivery (x-delayed-message exchanges, as the
// rabbitmq-delayed-message-exchange plugin's clients use them): a delayed
// exchange holds a message that is due later in a holding queue of its
// own, an entry whose Deadline is the due time, and releases it then:
// routes it through the exchange's bindings as its underlying type and
// moves it into the queues found, exactly as a dead letter is moved (the
// delete from the holding queue and the puts into the targets are one
// store batch). Everything else is a queue's: the entries are stored
// (persistent messages of a durable exchange, confirmed once stored),
// paged with flat memory, and their deadlines fire wherever they sit, as
// TTL expiry does (expiry.go, pagedexpiry.go), after a restart too.
//
// A holding queue is internal: its vhost does not list it among its
// queues, so no client can name it, no policy applies to it, and it is
// created, recovered and deleted with its exchange (the broker's
// delayed.go).

// holdPrefix starts the name of every holding queue: HoldName. Clients
// cannot declare a queue whose name starts with "amq." (a declaration,
// the HTTP API and a definitions import all refuse it), and the broker's
// own amq. names are amq.gen-… and amq.rabbitmq.reply-to.
const holdPrefix = "amq.delayed/"

// HoldName is the name of the holding queue of delayed exchange
// exchange: its definition record's name (the record is a queue's, in the
// vhost's queue records). The mapping is one to one.
func HoldName(exchange string) string { return holdPrefix + exchange }

// HoldExchange returns the exchange whose holding queue is named name, if
// name is a holding queue's.
func HoldExchange(name string) (string, bool) { return strings.CutPrefix(name, holdPrefix) }

// NewHold returns the holding queue of delayed exchange exchange in
// vhost h: durable when the exchange is.
func NewHold(env *Env, h *Host, id store.QueueID, exchange string, durable bool) *Queue {
	q := New(env, h, id, HoldName(exchange), durable, false, false, nil)
	q.holdFor = exchange
	return q
}

// IsHold reports whether q is a delayed exchange's holding queue.
func (q *Queue) IsHold() bool { return q.holdFor != "" }

// Held returns the number of messages q holds (a holding queue's
// messages_delayed). It reads a counter, without q's lock.
func (q *Queue) Held() int64 { return q.readyN.Load() }

// MaxDelay bounds how far ahead a message may be scheduled, in ms: ten
// years, as a TTL. A message due later is routed at once, as the plugin
// routes one whose x-delay is over its timer's limit (2^32-1 ms, about
// 49.7 days; brokerd needs no such limit below this one).
const MaxDelay = MaxExpiration

// DueAt returns when a message with headers h, published at now (ms,
// rounded up: the arrival time TTLs count from), is due on a delayed
// exchange, and whether it is due later than now at all (held): from
// x-delivery-time, an absolute time in Unix milliseconds (an integer or a
// numeric string), when it has one that parses, else from x-delay, a
// delay in ms taken as the plugin takes it (delayHeader). A message due
// now, in the past, or more than MaxDelay ahead is routed at once.
func DueAt(h amqp.Table, now func() int64) (due int64, held bool) {
	if len(h) == 0 {
		return 0, false
	}
	if v, ok := h.Get("x-delivery-time"); ok {
		if at, ok := deliveryTime(v); ok {
			n := now()
			if at <= n || at-n > MaxDelay {
				return 0, false
			}
			return at, true
		}
	}
	v, ok := h.Get("x-delay")
	if !ok {
		return 0, false
	}
	d, ok := delayHeader(v)
	if !ok || d <= 0 || d > MaxDelay {
		return 0, false
	}
	return now() + d, true
}

// delayHeader reads an x-delay header's value as the plugin does
// (rabbit_delayed_message_utils:get_delay): the integer types long,
// unsigned byte, short, unsigned short, int and unsigned int (not the
// signed byte); a longstr or byte array holding a decimal integer, with
// an optional sign; a float or double, truncated. Anything else is no
// delay. (The plugin fails the publishing channel on a longstr that is
// not a number; brokerd routes the message at once.)
func delayHeader(v any) (int64, bool) {
	switch n := v.(type) {
	case int8:
		return 0, false // not in the plugin's list
	case float32:
		return truncFloat(float64(n))
	case float64:
		return truncFloat(n)
	}
	return deliveryTime(v)
}

// deliveryTime reads an x-delivery-time header's value: any AMQP integer
// type, or a longstr or byte array holding a decimal integer.
func deliveryTime(v any) (int64, bool) {
	switch n := v.(type) {
	case string:
		return parseDecimal(n)
	case []byte:
		return parseDecimal(string(n))
	}
	return amqp.AsInt(v)
}

// parseDecimal parses a decimal integer with an optional sign, as
// Erlang's binary_to_integer does.
func parseDecimal(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// truncFloat truncates f toward zero; NaN, infinities and values out of
// int64's range are no number of milliseconds.
func truncFloat(f float64) (int64, bool) {
	if math.IsNaN(f) || f >= math.MaxInt64 || f <= math.MinInt64 {
		return 0, false
	}
	return int64(f), true
}

// newReleaseLog returns the rate-limited warning for held messages that
// found no queue at their due time: the same kind of topology problem as a
// dead letter dropped for want of a route (newDropLogs).
func newReleaseLog(log *slog.Logger) *ratelog.Limiter {
	return ratelog.New(log, slog.LevelWarn, "delayed messages dropped at their due time: no route", ratelog.Interval)
}

// releaseLocked releases the held entries es of holding queue q, which
// are due (they have left its ready list): each is routed through q's
// delayed exchange as its underlying type, with its routing keys and
// properties, x-delay negated as the plugin does (so a delayed exchange
// further on does not hold it again), and moved into the queues found
// within t: the delete of the held entry and the puts of its copies are
// one batch, so it is held or delivered, never both or neither. The
// exchange's alternate exchange takes what its bindings do not; a message
// that reaches no queue then is dropped, counted and logged. They are
// released in due-time order, then in the order they were published.
//
// An exchange that is gone (its deletion is under way: it takes q with
// it) releases nothing.
//
// Caller holds q.mu; the vhost lock is taken shared (Txn.hold) to route.
func (q *Queue) releaseLocked(t *Txn, es []*Entry) {
	if len(es) == 0 {
		return
	}
	b := q.Env
	r := q.Host.Router
	t.hold(r)
	if !r.IsHoldLocked(q.holdFor, q) {
		return // deleted with its exchange (or being): nothing is routed
	}
	slices.SortFunc(es, func(a, b *Entry) int {
		return cmp.Or(cmp.Compare(a.Deadline, b.Deadline), cmp.Compare(a.Seq, b.Seq))
	})
	at := arrivedAt(b.arrivalMS()) // the copies' TTLs count from their release
	for _, e := range es {
		if q.releaseOneLocked(t, e, &at) {
			b.Counters.DelayedReleased.Add(1)
			continue
		}
		t.del(e)
		b.Counters.DelayedDropped.Add(1)
		b.releaseLog.Event("vhost", q.Host.Name, "exchange", q.holdFor)
	}
}

// releaseOneLocked routes held entry e and plans its copies into their
// queues within t, beside the delete of e. It reports false, planning
// nothing, when no queue takes it (no route, or every target full).
func (q *Queue) releaseOneLocked(t *Txn, e *Entry, at *arrival) bool {
	b := q.Env
	h := e.EffectiveHeader()
	props, err := amqp.DecodeProperties(h.Props)
	if err != nil {
		// Stored properties were validated when published.
		b.Log.Error("delayed message: undecodable stored properties; dropping", "exchange", q.holdFor, "err", err)
		return false
	}
	header := h
	if d, ok := props.Headers.Get("x-delay"); ok {
		if n, ok := delayHeader(d); ok && n > 0 {
			props.Headers = props.Headers.With("x-delay", -n)
			raw, err := props.Append(nil)
			if err != nil {
				b.Log.Error("delayed message: cannot encode its properties; dropping", "exchange", q.holdFor, "err", err)
				return false
			}
			header = &store.Header{Exchange: h.Exchange, RoutingKeys: h.RoutingKeys, Props: raw}
		}
	}
	targets := q.Host.Router.RouteLocked(q.holdFor, h.RoutingKeys, props.Headers)
	size := e.BodySize()
	var taking []*Queue
	for _, tq := range targets {
		if tq.isDeleted() || tq == q {
			continue
		}
		if !tq.reserve(size) {
			b.Counters.Overflowed.Add(1) // a reject-publish queue refuses it
			continue
		}
		taking = append(taking, tq)
	}
	if len(taking) == 0 {
		return false
	}
	if header == h {
		header = nil // the copies keep their message's own header
	}
	ttl := expirationTTL(&props)
	var clone *store.Message
	for _, tq := range taking {
		// As a dead-lettered copy (planDeadLetterLocked): a stored copy
		// needs a stored body that outlives e's delete.
		msg := e.Msg
		if !e.durable() && tq.isStoredFor(msg) {
			if clone == nil {
				clone = b.ownMessage(msg)
			}
			msg = clone
		}
		ne := tq.newCopyEntry(msg, header, props.Priority, ttl, at)
		if ne.stored {
			t.put(ne)
		}
		t.inserts = append(t.inserts, ne)
		tq.Stats.Publish.Add(1)
	}
	t.del(e)
	return true
}

// expirationTTL is the per-message TTL of a released message's expiration
// property (validated when it was published), -1 if none: it counts from
// the release, as for a message published then.
func expirationTTL(p *amqp.Properties) int64 {
	if p.Flags&amqp.FlagExpiration == 0 {
		return -1
	}
	n, err := strconv.ParseInt(p.Expiration, 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return min(n, MaxExpiration)
}
