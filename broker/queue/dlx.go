package queue

import (
	"bytes"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/stats"
	"github.com/brokerd/brokerd/deadletter"
	"github.com/brokerd/brokerd/internal/ratelog"
	"github.com/brokerd/brokerd/store"
)

// strategyOf is the strategy of a queue that has a dead letter exchange.
func strategyOf(cfg *Settings) int {
	if cfg.atLeastOnce {
		return stats.StrategyAtLeastOnce
	}
	return stats.StrategyAtMostOnce
}

// deadLetterLocked dead-letters entries that have left q (their state is
// already stGone) for reason: with no dead letter exchange they are
// dropped; otherwise each is rewritten (x-death etc.), routed through the
// DLX and its copies planned into the target queues within t, beside the
// delete of its source entry. Where no target takes it, an at-least-once
// queue keeps it in its dead-letter backlog (if backlogOK) and the others
// drop it, counting why.
//
// Caller holds q.mu. The vhost lock is taken shared to route.
func (q *Queue) deadLetterLocked(t *Txn, es []*Entry, reason deadletter.Reason, backlogOK bool) {
	if len(es) == 0 {
		return
	}
	b := q.Env
	cfg := q.Settings()
	ri := stats.ReasonIndex(reason)
	if !cfg.hasDLX {
		for _, e := range es {
			t.del(e)
			if e.DeadLetter == "" { // a waiting dead letter was counted when it died
				b.Counters.DeadLetteredBy[stats.StrategyDisabled][ri].Add(1)
			}
		}
		b.Counters.Discarded(reason, len(es))
		b.Counters.Drops[stats.DropNoDLX].Add(uint64(len(es)))
		return
	}
	r := q.Host.Router
	now := b.Now()
	arrival := ceilMS(now) // the copies' deadlines count from it
	// Held until the batch is applied, so no target can be deleted
	// between routing to it and the put that gives it the copy.
	t.hold(r)
	hasDLX := r.HasExchangeLocked(cfg.dlx)
	var memo dlMemo
	for _, e := range es {
		cause := -1
		if !hasDLX {
			cause = stats.DropDLXMissing
		} else {
			died := now // a waiting dead letter died when it entered the backlog
			if e.DeadAt != 0 {
				died = time.UnixMilli(e.DeadAt)
			}
			cause = q.planDeadLetterLocked(t, cfg, e, reason, died, arrival, backlogOK, &memo)
		}
		if e.DeadLetter == "" { // a waiting dead letter was counted when it died
			b.Counters.DeadLetteredBy[strategyOf(cfg)][ri].Add(1)
		}
		if cause < 0 {
			q.Stats.DeadLettered[ri].Add(1)
			b.Counters.DeadLettered[ri].Add(1)
			if cfg.atLeastOnce {
				b.Counters.DeadLetteredConfirmed.Add(1)
			}
			continue
		}
		if cfg.atLeastOnce && backlogOK {
			q.toBacklogLocked(t, e, reason, now.UnixMilli())
			if cause == stats.DropTargetFull {
				q.backlogFull = true // worth retrying without a topology change
			}
			continue
		}
		t.del(e)
		b.Counters.Drops[cause].Add(1)
		b.Counters.Discarded(reason, 1)
		b.dropLog[cause].Event("vhost", q.Host.Name, "queue", q.Name, "reason", string(reason), "dead_letter_exchange", cfg.dlx)
	}
}

// newDropLogs returns the rate-limited warnings for dead letters dropped
// although their queue has a dead letter exchange (an exchange missing,
// no route, a cycle, every target full): a topology problem an operator
// should see, logged at most about once a second per cause with a count,
// whatever the message rate. A queue without a dead letter exchange
// (no_dlx) discards by design and logs nothing.
func newDropLogs(log *slog.Logger) [stats.NumDropCauses]*ratelog.Limiter {
	var l [stats.NumDropCauses]*ratelog.Limiter
	for c := range stats.NumDropCauses {
		if c == stats.DropNoDLX {
			continue
		}
		l[c] = ratelog.New(log.With("cause", stats.DropCauseNames[c]), slog.LevelWarn, "dead letters dropped", ratelog.Interval)
	}
	return l
}

// dlMemo keeps the last dead letter's rewrite and route within one
// deadLetterLocked call (one queue, one reason, one configuration, the
// vhost read-locked): consecutive dead letters published alike — the same
// properties, exchange and routing keys, dying within the same second —
// get the same x-death headers and the same targets, so they share one
// rewrite, one encoding of it and one stored header.
type dlMemo struct {
	src     *store.Header // the last source header, and what it held:
	props   []byte
	xchg    string
	keys    []string
	sec     int64 // died, in Unix seconds (x-death's time)
	prio    uint8
	res     deadletter.Result
	targets []*Queue
	header  *store.Header // nil: the rewritten properties are not encoded yet
	// origin is the copies' dead-letter record (store.Origin), shared by
	// the dead letters that died in the same millisecond.
	origin *store.Origin
}

// hit reports whether h dying at sec rewrites as the memo's dead letter.
func (m *dlMemo) hit(h *store.Header, sec int64) bool {
	if m.src == nil || sec != m.sec {
		return false
	}
	return h == m.src || bytes.Equal(h.Props, m.props) && h.Exchange == m.xchg && slices.Equal(h.RoutingKeys, m.keys)
}

// planDeadLetterLocked rewrites and routes one dead letter (which died at
// died) and plans its copies. It returns -1 when the copies are planned,
// else the drop cause. Where the message may wait (at-least-once, with
// backlogOK), it goes to all its targets or to none: a full target keeps
// it waiting rather than deliver it to some. Caller holds q.mu and, through
// t, v.mu (shared).
func (q *Queue) planDeadLetterLocked(t *Txn, cfg *Settings, e *Entry, reason deadletter.Reason, died time.Time, arrival int64, backlogOK bool, m *dlMemo) int {
	b := q.Env
	h := e.EffectiveHeader()
	if !m.hit(h, died.Unix()) {
		props, err := amqp.DecodeProperties(h.Props)
		if err != nil {
			// Stored properties were validated when published.
			b.Log.Error("dead-letter: undecodable stored properties; dropping", "queue", q.Name, "err", err)
			return stats.DropUnroutable
		}
		res := deadletter.Rewrite(deadletter.Source{
			Props: props, Exchange: h.Exchange, RoutingKeys: h.RoutingKeys,
			Queue: q.Name, Reason: reason, Time: died,
		}, deadletter.Target{Exchange: cfg.dlx, RoutingKey: cfg.dlrk, HasRoutingKey: cfg.hasDLRK})
		*m = dlMemo{
			src: h, props: h.Props, xchg: h.Exchange, keys: h.RoutingKeys, sec: died.Unix(),
			prio: props.Priority, res: res,
			targets: q.Host.Router.RouteLocked(cfg.dlx, res.RoutingKeys, res.Props.Headers),
		}
	}
	res, targets := &m.res, m.targets
	if len(targets) == 0 {
		return stats.DropUnroutable
	}
	size := e.BodySize()
	cause := stats.DropUnroutable
	var taking []*Queue
	full := false
	for _, tq := range targets {
		if deadletter.IsCycle(res.History, reason, tq.Name) {
			b.logCycle(q, tq, reason)
			b.Counters.Cycles.Add(1)
			cause = stats.DropCycle
			continue
		}
		if tq.isDeleted() {
			continue
		}
		if !tq.reserve(size) {
			full = true
			cause = stats.DropTargetFull
			continue
		}
		taking = append(taking, tq)
	}
	if len(taking) == 0 || (full && cfg.atLeastOnce && backlogOK) {
		for _, tq := range taking {
			tq.release(size)
		}
		return cause
	}
	if m.header == nil {
		raw, err := res.Props.Append(nil)
		if err != nil {
			for _, tq := range taking {
				tq.release(size)
			}
			b.Log.Error("dead-letter: cannot encode rewritten properties; dropping", "queue", q.Name, "err", err)
			return stats.DropUnroutable
		}
		m.header = &store.Header{Exchange: res.Exchange, RoutingKeys: res.RoutingKeys, Props: raw}
	}
	header := m.header
	// The broker's own record of where the copies come from: what a
	// redrive to the origin goes by, never x-death, which the publisher
	// of a message can have written.
	if o := m.origin; o == nil || o.At != died.UnixMilli() {
		m.origin = &store.Origin{Queue: q.Name, Reason: string(reason), At: died.UnixMilli()}
	}
	var clone *store.Message
	at := arrivedAt(arrival)
	for _, tq := range taking {
		// A stored copy refers to its message's stored body. Only a
		// source entry that is stored itself, durably, proves that body
		// is still there, and will survive a crash, when the copy's put
		// lands (the batch puts before it
		// deletes); otherwise its other entries may all be gone and
		// the store may have dropped it, so the copy gets a message of
		// its own, written with it.
		msg := e.Msg
		if !e.durable() && tq.isStoredFor(msg) {
			if clone == nil {
				clone = b.ownMessage(msg)
			}
			msg = clone
		}
		// The copy has no expiration property any more: only the
		// target's own message TTL applies.
		// The message's priority, not e's level: the target may have
		// other levels than q.
		ne := tq.newCopyEntry(msg, header, m.prio, -1, &at)
		ne.Origin = m.origin
		if ne.stored {
			t.put(ne)
		}
		t.inserts = append(t.inserts, ne)
	}
	t.del(e)
	return -1
}

// toBacklogLocked keeps a dead letter that found no route in q's
// dead-letter backlog, in the store's backlog ranges (backlog.go),
// forwarded by retryBacklogLocked once a route exists.
func (q *Queue) toBacklogLocked(t *Txn, e *Entry, reason deadletter.Reason, nowMS int64) {
	q.storeBacklogLocked(t, e, reason, nowMS)
}

// clearBacklogFlagLocked clears the backlog flag of q's stored state, in
// t: a layout before the stored backlog (backlog.go) kept waiting dead
// letters among the queue's entries and set it, and a restart reads every
// entry of a queue whose flag is set. Nothing sets it any more.
func (q *Queue) clearBacklogFlagLocked(t *Txn) {
	if !q.BacklogMarked || q.isDeleted() {
		return
	}
	q.BacklogMarked = false
	t.Batch.Meta = append(t.Batch.Meta, defs.EncodeQueueState(q.stateLocked()))
}

// retryBacklogLocked tries again to forward q's waiting dead letters, in
// the order they were dead-lettered.
func (q *Queue) retryBacklogLocked(t *Txn) {
	q.retryStoredLocked()
	if len(q.backlog) == 0 || q.isDeleted() {
		return
	}
	pending := q.takeBacklogLocked()
	// Regroup runs of one reason so the order is kept.
	for len(pending) > 0 {
		r := deadletter.Reason(pending[0].DeadLetter)
		n := 1
		for n < len(pending) && pending[n].DeadLetter == string(r) {
			n++
		}
		for _, e := range pending[:n] {
			e.state = stGone
		}
		q.deadLetterLocked(t, pending[:n], r, true)
		pending = pending[n:]
	}
	if len(q.backlog) == 0 {
		q.clearBacklogFlagLocked(t)
	}
}

// cycleLog rate-limits the warning for dead-letter cycles: once a minute
// per (source, target) pair, for at most cycleLogPairs pairs a minute (the
// cycles counter counts them all). It forgets a pair once its minute is
// over or a queue of it is deleted, so it holds no deleted queue.
//
// mu guards last. It is a leaf (the warning is logged after it is
// released), taken under the source's Queue.mu and VHost.mu shared
// (logCycle, while a dead letter is planned), or after a queue's deletion
// released its locks (forgetCycles, under Broker.authMu when a vhost
// goes).
type cycleLog struct {
	mu   sync.Mutex
	last map[[2]*Queue]time.Time // mu
}

const cycleLogPairs = 256

// forgetCycles drops the pairs of the deleted queue q.
func (b *Env) forgetCycles(q *Queue) {
	b.cycles.mu.Lock()
	defer b.cycles.mu.Unlock()
	for k := range b.cycles.last {
		if k[0] == q || k[1] == q {
			delete(b.cycles.last, k)
		}
	}
}

func (b *Env) logCycle(from, to *Queue, reason deadletter.Reason) {
	key := [2]*Queue{from, to}
	now := b.Now()
	b.cycles.mu.Lock()
	if b.cycles.last == nil {
		b.cycles.last = make(map[[2]*Queue]time.Time)
	}
	if t, ok := b.cycles.last[key]; ok && now.Sub(t) < time.Minute {
		b.cycles.mu.Unlock()
		return
	}
	if len(b.cycles.last) >= cycleLogPairs {
		for k, t := range b.cycles.last {
			if now.Sub(t) >= time.Minute || k[0].isDeleted() || k[1].isDeleted() {
				delete(b.cycles.last, k)
			}
		}
		if len(b.cycles.last) >= cycleLogPairs {
			b.cycles.mu.Unlock()
			return
		}
	}
	b.cycles.last[key] = now
	b.cycles.mu.Unlock()
	b.Log.Warn("dead-letter cycle: message not delivered to a queue it was already dead-lettered from, with no rejection in between",
		"vhost", from.Host.Name, "from", from.Name, "to", to.Name, "reason", string(reason))
}
