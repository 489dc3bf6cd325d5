package queue

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/policy"
)

// Delayed retry (RabbitMQ 4.3's x-delayed-retry-* on quorum queues,
// LavinMQ's automatic retries; here on every queue type): a message a
// consumer returns to a queue that enables it is not ready again at once.
// It is parked: taken out of the ready list, with its due time (ReadyAt,
// unix ms) written in the same store update that records the return, and
// kept resident in q.parked until then, like a delivery not yet settled
// (its seq lies below every seq of the level's middle and tail, since it
// was delivered from the head). So it blocks nothing behind it, is never
// delivered before its due time, and its due time survives a restart.
// Its timer is the entry's own expiry timer, set to the earlier of its due
// time and its deadline: a parked message expires at its deadline too
// (brokerd expires anywhere, not only at promotion as RabbitMQ does).
//
// When due it becomes ready at its sequence position: it was delivered
// from the head, so it goes back near the front, ahead of the messages
// never delivered, as RabbitMQ's due retries go to its returns queue,
// served before the others (they are ordered there by return time, here
// by original position). Parked messages count as messages (messages,
// messages_delayed) and toward length limits, not as ready; a drop-head
// limit evicts only ready ones; a purge and a deletion take them too.
//
// After a restart a parked message is found where paging finds every
// stored entry: a recovered level is one middle read as it is consumed
// (mergeLocked), and an entry read whose ReadyAt is still ahead is parked
// instead of made ready. So none is delivered early. For a queue whose
// settings enable retry, the part of each level up to its delivered mark
// (deliveredmarks.go: everything delivered before the stop, which is
// where parked messages lie) is read at recovery (ArmRecovered), so their
// timers run and messages_delayed counts them from the start; that part is
// what was resident before the stop (unacked, returned and parked
// messages), so the read is bounded by it, not by the queue's depth.
//
// Which returns delay, and which count (RabbitMQ 4.3, research §A.2,
// §A.4): a failed return (basic.reject requeue=true; a channel or
// connection closed with the message unacked) and a plain one (basic.nack
// requeue=true, basic.recover, the consumer timeout); the type says which
// are delayed (all, failed, returned). In a queue that enables retry,
// AcquiredCount counts every return and DeliveryCount the failed ones,
// which the delivery limit (default 20 there) and the backoff use, as in
// RabbitMQ 4.3. A queue configured with LavinMQ's arguments only (no
// x-delayed-retry-type: LavinMQ has none) counts every return as a
// delivery, as LavinMQ does: a nack loop then ends at the delivery limit,
// which LavinMQ's users rely on. Queues without retry count as before:
// every return is a delivery (SPEC §5).

// retryType is x-delayed-retry-type.
type retryType uint8

const (
	retryOff retryType = iota
	retryAll
	retryFailed
	retryReturned
)

// retryTypes maps x-delayed-retry-type's values.
var retryTypes = map[string]retryType{"disabled": retryOff, "all": retryAll, "failed": retryFailed, "returned": retryReturned}

// retryConfig is a queue's effective delayed retry settings.
type retryConfig struct {
	kind retryType
	min  int64 // ms, > 0 when kind is not retryOff
	max  int64 // ms; 0: no cap (LavinMQ without a maximum)
	// mult is LavinMQ's multiplier: 0 linear (min × count), 1 constant,
	// ≥ 2 exponential (min × mult^(count-1)).
	mult int64
	// jitter is the largest fraction of a delay taken off at random
	// (brokerd's key): the delay is drawn uniformly from
	// [delay × (1-jitter), delay], so the maximum stays a maximum.
	jitter float64
	// countAll: every return counts as a delivery (no type given: LavinMQ).
	countAll bool
}

// enabled reports whether returns to the queue may be delayed, and so
// whether it counts as RabbitMQ 4.3 or LavinMQ do.
func (c *retryConfig) enabled() bool { return c.kind != retryOff }

// delays reports whether a return (failed or not) is delayed.
func (c *retryConfig) delays(failed bool) bool {
	switch c.kind {
	case retryAll:
		return true
	case retryFailed:
		return failed
	case retryReturned:
		return !failed
	}
	return false
}

// delay returns the delay in ms of a return of a message whose delivery
// count (after this return) is count: at least min × 1, capped at max
// (when set) and at MaxExpiration, less the jitter drawn from r (in
// [0, 1)).
func (c *retryConfig) delay(count uint32, r float64) int64 {
	n := int64(max(count, 1))
	var d int64
	switch {
	case c.mult == 0:
		d = mulCap(c.min, n)
	default:
		d = c.min
		for i := int64(1); i < n && c.mult > 1 && d < MaxExpiration; i++ {
			d = mulCap(d, c.mult)
		}
	}
	if c.max > 0 {
		d = min(d, c.max)
	}
	d = min(d, MaxExpiration)
	if c.jitter > 0 {
		d -= int64(float64(d) * c.jitter * r)
	}
	return d
}

// mulCap is a × b for non-negative a and b, saturating at MaxExpiration.
func mulCap(a, b int64) int64 {
	if a != 0 && b > MaxExpiration/a {
		return MaxExpiration
	}
	return a * b
}

// resolveRetry computes the delayed retry settings from arguments args
// and the effective policy definition pol (nil: none).
//
//   - type: the policy wins (RabbitMQ 4.3: policy_has_precedence);
//     without one anywhere, x-delayed-retry-min alone enables all
//     (LavinMQ's meaning);
//   - min, max, multiplier, jitter: the smaller of argument and policy
//     (RabbitMQ 4.3 for min and max, LavinMQ for all of its keys);
//   - a min of 0 (or none) disables retry, as RabbitMQ resolves it;
//   - no max: the delay stays at min when a type was given (RabbitMQ:
//     max defaults to min), is not capped otherwise (LavinMQ).
func resolveRetry(args amqp.Table, pol map[string]any) retryConfig {
	argNum := func(key string) (float64, bool) {
		v, ok := args.Get(key)
		if !ok {
			return 0, false
		}
		return argFloat(v)
	}
	polNum := func(key string) (float64, bool) {
		v, ok := pol[key]
		if !ok {
			return 0, false
		}
		return policy.Float(v)
	}
	smaller := func(arg, key string) (float64, bool) {
		a, aok := argNum(arg)
		p, pok := polNum(key)
		switch {
		case aok && pok:
			return min(a, p), true
		case aok:
			return a, true
		}
		return p, pok
	}
	var c retryConfig
	typ, typed := "", false
	if s, ok := pol["delayed-retry-type"].(string); ok {
		typ, typed = s, true
	} else if v, ok := args.Get("x-delayed-retry-type"); ok {
		typ, typed = stringArg(v), true
	}
	if m, ok := smaller("x-delayed-retry-min", "delayed-retry-min"); ok && m > 0 {
		c.min = int64(m)
	}
	if c.min <= 0 {
		return retryConfig{}
	}
	if typed {
		c.kind = retryTypes[typ]
	} else {
		c.kind, c.countAll = retryAll, true
	}
	if c.kind == retryOff {
		return retryConfig{}
	}
	if m, ok := smaller("x-delayed-retry-max", "delayed-retry-max"); ok && m > 0 {
		c.max = int64(m)
	} else if typed {
		c.max = c.min
	}
	if m, ok := smaller("x-delayed-retry-multiplier", "delayed-retry-multiplier"); ok && m >= 1 {
		c.mult = int64(m)
	}
	if j, ok := smaller("x-delayed-retry-jitter", "delayed-retry-jitter"); ok && j > 0 {
		c.jitter = min(j, 1)
	}
	return c
}

// argFloat reads a numeric argument: any AMQP integer, float or double.
func argFloat(v any) (float64, bool) {
	if n, ok := amqp.AsInt(v); ok {
		return float64(n), true
	}
	switch f := v.(type) {
	case float32:
		return float64(f), !math.IsNaN(float64(f))
	case float64:
		return f, !math.IsNaN(f)
	}
	return 0, false
}

// stringArg reads a string argument (a longstr, or a byte array).
func stringArg(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	}
	return ""
}

// checkRetryArg validates an x-delayed-retry-* argument and returns the
// error text, or "". RabbitMQ 4.3 ignores bad values silently (and so
// turns the feature off); brokerd refuses them, as LavinMQ does, so that a
// queue meant for backoff never becomes a hot requeue loop.
func checkRetryArg(key string, v any) string {
	switch key {
	case "x-delayed-retry-type":
		s, ok := v.(string)
		if !ok {
			return "{unacceptable_type," + amqp.TypeName(v) + "}"
		}
		if _, ok := retryTypes[s]; !ok {
			return "'" + s + "' is not a valid delayed retry type. Must be one of: all, failed, returned, disabled"
		}
	case "x-delayed-retry-jitter":
		f, ok := argFloat(v)
		if !ok {
			return "{unacceptable_type," + amqp.TypeName(v) + "}"
		}
		if f < 0 || f > 1 {
			return "jitter must be a number from 0 to 1"
		}
	}
	return ""
}

// --- parking -------------------------------------------------------------

// parkLocked keeps e, returned and delayed until e.ReadyAt, out of the
// ready list, and arms its timer (unless the queue is recovering: then
// ArmRecovered does).
func (q *Queue) parkLocked(e *Entry) {
	e.state = stParked
	if q.parked == nil {
		q.parked = make(map[*Entry]struct{})
	}
	q.parked[e] = struct{}{}
	q.parkedB += int64(e.BodySize())
	q.syncParked()
	if !q.recovering {
		q.armParkedLocked(e)
	}
}

// armParkedLocked sets e's timer to its due time, or to its deadline if
// that comes first.
func (q *Queue) armParkedLocked(e *Entry) {
	at := e.ReadyAt
	if e.Deadline != 0 && e.Deadline < at {
		at = e.Deadline
	}
	e.timer.Deadline = at
	q.Env.Timers.Add(&e.timer)
}

// unparkLocked takes e out of the parked set and disarms its timer.
func (q *Queue) unparkLocked(e *Entry) {
	delete(q.parked, e)
	q.parkedB -= int64(e.BodySize())
	q.syncParked()
	q.Env.Timers.Remove(&e.timer)
}

func (q *Queue) syncParked() {
	q.delayedN.Store(int64(len(q.parked)))
	q.delayedB.Store(q.parkedB)
}

// clearParkedLocked takes every parked entry out (a purge or deletion)
// and returns them.
func (q *Queue) clearParkedLocked() []*Entry {
	es := make([]*Entry, 0, len(q.parked))
	for e := range q.parked {
		q.Env.Timers.Remove(&e.timer)
		e.state = stGone
		es = append(es, e)
	}
	clear(q.parked)
	q.parkedB = 0
	q.syncParked()
	return es
}

// dueParkedLocked handles parked entries whose timers fired: those past
// their deadline are returned (to be dead-lettered, expired), those due
// become ready at their positions, in seq order, and are delivered; a
// timer that fired early by our clock waits again.
func (q *Queue) dueParkedLocked(t *Txn, es []*Entry, now int64) (expired []*Entry) {
	var due []*Entry
	for _, e := range es {
		if e.state != stParked {
			continue // purged, or promoted meanwhile
		}
		switch {
		case e.expiredAt(now):
			q.unparkLocked(e)
			e.state = stGone
			expired = append(expired, e)
		case e.ReadyAt <= now:
			q.unparkLocked(e)
			due = append(due, e)
		default:
			q.armParkedLocked(e)
		}
	}
	if len(due) == 0 {
		return expired
	}
	slices.SortFunc(due, func(a, b *Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	for _, e := range due {
		// The store keeps the passed ReadyAt: an entry read back with
		// one not ahead is ready. The next update writes 0.
		e.ReadyAt = 0
		q.makeReadyLocked(e, false)
	}
	q.dispatchLocked(t)
	return expired
}

// countReturnLocked counts the return of delivered entry e (failed or
// not) to q with retry settings rc: every return is a delivery where
// retry is off (SPEC §5); with it, AcquiredCount counts every return and
// DeliveryCount the failed ones (RabbitMQ 4.3), or every one (countAll:
// LavinMQ).
func (q *Queue) countReturnLocked(e *Entry, rc *retryConfig, failed bool) {
	e.Redelivered = true
	if !rc.enabled() {
		e.DeliveryCount++
		return
	}
	e.AcquiredCount++
	if failed || rc.countAll {
		e.DeliveryCount++
	}
}

// retryAt returns the due time of e's delayed return at now (arrival ms),
// 0 if the return is not delayed.
func retryAt(rc *retryConfig, e *Entry, failed bool, now int64) int64 {
	if !rc.enabled() || !rc.delays(failed) {
		return 0
	}
	var r float64
	if rc.jitter > 0 {
		r = rand.Float64()
	}
	d := rc.delay(e.DeliveryCount, r)
	if d <= 0 {
		return 0
	}
	return now + d
}

// readParkedLocked reads back, while q recovers, the part of each level
// that may hold entries parked before the stop: up to the level's
// recovered delivered mark (every parked entry was delivered), and only
// for a queue whose settings enable retry (any other finds its parked
// entries as it pages, mergeLocked). What it reads is what was resident
// before the stop, not the queue's depth.
func (q *Queue) readParkedLocked() {
	if !q.Settings().retry.enabled() || q.ready.Window <= 0 {
		return
	}
	for lv := range q.recMarks {
		l := q.ready.Level(uint8(lv))
		for l.Mid.N > 0 && l.Mid.From <= q.recMarks[lv] {
			from, n := l.Mid.From, l.Mid.N
			q.fillLocked(l)
			if l.Mid.From == from && l.Mid.N == n {
				break // the store failed: the level's next refill reads it
			}
		}
	}
}
