package deadletter

import (
	"slices"
	"time"

	"github.com/brokerd/brokerd/amqp"
)

// Reason is why a message was dead-lettered, as x-death spells it.
type Reason string

// The reasons.
const (
	Rejected      Reason = "rejected"
	Expired       Reason = "expired"
	MaxLen        Reason = "maxlen"
	DeliveryLimit Reason = "delivery_limit"
	// Damaged is brokerd's own: the message's body was lost to damaged
	// data on disk; what is dead-lettered is its properties with an
	// empty body, so the application learns which message it lost.
	Damaged Reason = "damaged"
)

// Death is one event of the message's history.
type Death struct {
	Queue  string
	Reason Reason
}

// Source describes the message being dead-lettered and where from.
type Source struct {
	// Props are the message's properties as they are now (decoded).
	Props amqp.Properties
	// Exchange and RoutingKeys are the message's current routing: the
	// exchange it was last published or dead-lettered to, and its keys
	// (the routing key first, then CC keys, then BCC keys).
	Exchange    string
	RoutingKeys []string
	// Queue is the queue it is leaving; Reason why.
	Queue  string
	Reason Reason
	// Time is when it happens.
	Time time.Time
}

// Target is where the message goes.
type Target struct {
	Exchange string
	// RoutingKey replaces the message's keys when HasRoutingKey.
	RoutingKey    string
	HasRoutingKey bool
}

// Result is the dead-lettered message.
type Result struct {
	Props       amqp.Properties
	Exchange    string
	RoutingKeys []string // to route with; the first is basic.deliver's routing-key
	// History is the message's x-death history after this death, most
	// recent first (for cycle detection).
	History []Death
}

// Rewrite applies one death to a message (see the package doc).
func Rewrite(src Source, to Target) Result {
	p := src.Props // copy; Headers is replaced, never mutated
	h := p.Headers

	deaths, wellFormed := xDeath(h)
	first := !wellFormed || len(deaths) == 0

	// Routing keys recorded in x-death: the publish key and CC, not BCC.
	recorded := []any{}
	if len(src.RoutingKeys) > 0 {
		recorded = append(recorded, src.RoutingKeys[0])
	}
	for _, k := range ccKeys(h) {
		recorded = append(recorded, k)
	}

	idx := -1
	for i, d := range deaths {
		if q, r, ok := deathKey(d); ok && q == src.Queue && r == string(src.Reason) {
			idx = i
			break
		}
	}
	var entry amqp.Table
	if idx >= 0 {
		entry = withCount(deaths[idx])
		deaths = append(deaths[:idx:idx], deaths[idx+1:]...)
	} else {
		if p.Flags&amqp.FlagExpiration != 0 {
			entry = append(entry, amqp.Field{Key: "original-expiration", Value: p.Expiration})
		}
		entry = append(entry,
			amqp.Field{Key: "count", Value: int64(1)},
			amqp.Field{Key: "reason", Value: string(src.Reason)},
			amqp.Field{Key: "queue", Value: src.Queue},
			amqp.Field{Key: "time", Value: amqp.Timestamp(src.Time.Unix())},
			amqp.Field{Key: "exchange", Value: src.Exchange},
			amqp.Field{Key: "routing-keys", Value: recorded},
		)
	}
	history := make([]any, 0, len(deaths)+1)
	history = append(history, entry)
	for _, d := range deaths {
		history = append(history, d)
	}

	// One copy of the headers, then set in place (as Table.With would,
	// field by field: a key present keeps its position).
	h = append(make(amqp.Table, 0, len(h)+7), h...)
	set := func(key string, v any) {
		for i := range h {
			if h[i].Key == key {
				h[i].Value = v
				return
			}
		}
		h = append(h, amqp.Field{Key: key, Value: v})
	}
	set("x-death", history)
	if first {
		set("x-first-death-reason", string(src.Reason))
		set("x-first-death-queue", src.Queue)
		set("x-first-death-exchange", src.Exchange)
	}
	set("x-last-death-reason", string(src.Reason))
	set("x-last-death-queue", src.Queue)
	set("x-last-death-exchange", src.Exchange)

	keys := src.RoutingKeys
	if to.HasRoutingKey {
		keys = []string{to.RoutingKey}
		h = slices.DeleteFunc(h, func(f amqp.Field) bool { return f.Key == "CC" })
	}
	p.Headers = h
	p.Flags |= amqp.FlagHeaders
	p.Flags &^= amqp.FlagExpiration
	p.Expiration = ""

	res := Result{Props: p, Exchange: to.Exchange, RoutingKeys: keys}
	for _, d := range history {
		if q, r, ok := deathKey(d.(amqp.Table)); ok {
			res.History = append(res.History, Death{Queue: q, Reason: Reason(r)})
		}
	}
	return res
}

// IsCycle reports whether delivering a message with this history (after
// the current death, most recent first) to queue target would close a
// cycle with no rejection in it (B27). A current death for reason
// rejected is never a cycle (B26).
func IsCycle(history []Death, reason Reason, target string) bool {
	if reason == Rejected {
		return false
	}
	for _, d := range history {
		if d.Reason == Rejected {
			return false
		}
		if d.Queue == target {
			return true
		}
	}
	return false
}

// xDeath returns the x-death entries if the header is well formed: an array
// whose every element is a table. A missing header is well formed and empty.
func xDeath(h amqp.Table) ([]amqp.Table, bool) {
	v, ok := h.Get("x-death")
	if !ok {
		return nil, true
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]amqp.Table, 0, len(arr))
	for _, e := range arr {
		t, ok := e.(amqp.Table)
		if !ok {
			return nil, false
		}
		out = append(out, t)
	}
	return out, true
}

// Latest is what a message's most recent x-death entry says (RabbitMQ
// keeps the most recent first): where it last died, and how it was routed
// then. A field the entry lacks (or holds with another type) is empty.
type Latest struct {
	Queue, Reason, Exchange string
	RoutingKeys             []string
	Time                    time.Time // zero without a timestamp
}

// LatestDeath returns h's most recent x-death entry, and false if there
// is none or it names no queue.
func LatestDeath(h amqp.Table) (Latest, bool) {
	var l Latest
	v, ok := h.Get("x-death")
	if !ok {
		return l, false
	}
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return l, false
	}
	t, ok := arr[0].(amqp.Table)
	if !ok {
		return l, false
	}
	l.Queue, ok = str(t, "queue")
	l.Reason, _ = str(t, "reason")
	l.Exchange, _ = str(t, "exchange")
	if ks, found := t.Get("routing-keys"); found {
		l.RoutingKeys = stringsOf(ks)
	}
	if tv, found := t.Get("time"); found {
		if ts, isTS := tv.(amqp.Timestamp); isTS {
			l.Time = time.Unix(int64(ts), 0)
		}
	}
	return l, ok
}

// deathKey returns an entry's queue and reason, if it has both as strings.
func deathKey(t amqp.Table) (queue, reason string, ok bool) {
	q, ok1 := str(t, "queue")
	r, ok2 := str(t, "reason")
	return q, r, ok1 && ok2
}

func str(t amqp.Table, key string) (string, bool) {
	v, ok := t.Get(key)
	if !ok {
		return "", false
	}
	switch s := v.(type) {
	case string:
		return s, true
	case []byte:
		return string(s), true
	}
	return "", false
}

// withCount returns entry with count incremented (as a long, whatever
// integer type it had) and every other field unchanged.
func withCount(entry amqp.Table) amqp.Table {
	n := int64(0)
	if v, ok := entry.Get("count"); ok {
		n = toInt(v)
	}
	return entry.With("count", n+1)
}

func toInt(v any) int64 {
	switch n := v.(type) {
	case int8:
		return int64(n)
	case uint8:
		return int64(n)
	case int16:
		return int64(n)
	case uint16:
		return int64(n)
	case int32:
		return int64(n)
	case uint32:
		return int64(n)
	case int64:
		return n
	}
	return 0
}

// ccKeys returns the string elements of the CC header.
func ccKeys(h amqp.Table) []string {
	v, ok := h.Get("CC")
	if !ok {
		return nil
	}
	return stringsOf(v)
}

// stringsOf returns the string elements of an array value (nil for
// anything else).
func stringsOf(v any) []string {
	arr, ok := v.([]any)
	if !ok {
		return nil
	}
	var out []string
	for _, e := range arr {
		switch s := e.(type) {
		case string:
			out = append(out, s)
		case []byte:
			out = append(out, string(s))
		}
	}
	return out
}
