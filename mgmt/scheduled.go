package mgmt

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
)

// Scheduled messages of delayed exchanges (x-delayed-message), brokerd's
// own: listed in due-time order, cancelled one by one or by filter.
// Listing needs read access to the exchange (as a peek needs it on a
// queue); cancelling needs read and write (broker.Direct.CancelScheduled).
// A message's id is its seq in the exchange's holding queue: stable while
// it is held, across restarts too.

// scheduledDefaultCount is a listing's count when the request names none.
const scheduledDefaultCount = 20

// listScheduled is GET /api/exchanges/{vhost}/{name}/scheduled?count=N
// [&after=CURSOR&truncate=N&encoding=auto|base64]: up to count held
// messages in due-time order (then id order), from the first after the
// cursor (absent: the first). The reply is {"messages": [...], "next":
// CURSOR, "messages_delayed": N}; next is "" on the last page, else the
// after of the following one ("DUE_MS-ID"). Each message is as a peek
// renders it (properties, payload, payload_bytes, payload_encoding,
// exchange, routing_key), with id, due (RFC 3339, ms, UTC), due_ms (Unix
// ms), due_in_ms (from now on the broker's clock; negative once due and
// not yet released) and routing_keys (CC and BCC too).
func (s *Server) listScheduled(u *broker.UserInfo, r *http.Request) (any, error) {
	qv := r.URL.Query()
	count, _, err := pageQuery(qv, scheduledDefaultCount, 0, broker.PeekMaxCount)
	if err != nil {
		return nil, err
	}
	var after broker.ScheduledPos
	if a := qv.Get("after"); a != "" {
		due, id, ok := strings.Cut(a, "-")
		d, err1 := strconv.ParseInt(due, 10, 64)
		n, err2 := strconv.ParseUint(id, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, badRequest("after must be a cursor DUE_MS-ID (a listing's next)")
		}
		after = broker.ScheduledPos{Due: d, Seq: n}
	}
	var truncate *jsonInt
	if tr := qv.Get("truncate"); tr != "" {
		n, err := strconv.Atoi(tr)
		if err != nil || n < 0 {
			return nil, badRequest("truncate must be a non-negative integer")
		}
		j := jsonInt(n)
		truncate = &j
	}
	encoding := qv.Get("encoding")
	switch encoding {
	case "":
		encoding = "auto"
	case "auto", "base64":
	default:
		return nil, badRequest("Unsupported encoding. Please use auto or base64.")
	}
	name := exchangeName(r.PathValue("name"))
	var ms []broker.ScheduledMessage
	err = s.withDirect(u, r.PathValue("vhost"), func(d *broker.Direct) error {
		var err error
		// One more than asked: whether there is a next page.
		ms, err = d.Scheduled(name, after, count+1)
		return err
	})
	if err != nil {
		return nil, err
	}
	next := ""
	var bytes int64
	for _, m := range ms {
		bytes += int64(len(m.Body))
	}
	switch {
	case len(ms) > count:
		ms = ms[:count]
		if count > 0 {
			next = scheduledCursor(ms[count-1].Pos())
		}
	case len(ms) > 0 && len(ms) < count && bytes >= broker.PeekMaxBytes:
		next = scheduledCursor(ms[len(ms)-1].Pos()) // cut by the byte bound
	}
	now := s.b.Now().UnixMilli()
	out := make([]map[string]any, 0, len(ms))
	for _, m := range ms {
		props, err := amqp.DecodeProperties(m.Props)
		if err != nil {
			return nil, fmt.Errorf("decode properties of scheduled message %d: %w", m.Seq, err)
		}
		ok := &amqp.BasicGetOk{Exchange: m.Exchange}
		if len(m.RoutingKeys) > 0 {
			ok.RoutingKey = m.RoutingKeys[0]
		}
		j := messageJSON(ok, props, m.Body, encoding, truncate)
		delete(j, "message_count")
		delete(j, "redelivered")
		j["id"] = m.Seq
		j["due"] = time.UnixMilli(m.Due).UTC().Format("2006-01-02T15:04:05.000Z07:00")
		j["due_ms"] = m.Due
		j["due_in_ms"] = m.Due - now
		j["routing_keys"] = append([]string{}, m.RoutingKeys...)
		out = append(out, j)
	}
	held := int64(0)
	if xi, err := s.b.Exchange(r.PathValue("vhost"), name); err == nil {
		held = xi.MessagesDelayed
	}
	return map[string]any{"messages": out, "next": next, "messages_delayed": held}, nil
}

// scheduledCursor is the after of the page following position p.
func scheduledCursor(p broker.ScheduledPos) string { return fmt.Sprintf("%d-%d", p.Due, p.Seq) }

// cancelScheduledOne is DELETE /api/exchanges/{vhost}/{name}/scheduled/{id}:
// it cancels the held message id, durably (a restart does not bring it
// back), and answers {"cancelled": 1}; 404 if the exchange holds no such
// message (never held, or released or cancelled already).
func (s *Server) cancelScheduledOne(u *broker.UserInfo, r *http.Request) (any, error) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		return nil, badRequest("id must be a scheduled message's id (an unsigned integer)")
	}
	var done []uint64
	err = s.withDirect(u, r.PathValue("vhost"), func(d *broker.Direct) error {
		var err error
		done, err = d.CancelScheduled(exchangeName(r.PathValue("name")), []uint64{id})
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(done) == 0 {
		return nil, &httpError{http.StatusNotFound, "not_found", fmt.Sprintf("no scheduled message %d (released or cancelled already, or never held)", id)}
	}
	return map[string]any{"cancelled": len(done)}, nil
}

// cancelBody is a POST of a cancel by filter: ids (cancel these), or the
// filters (all that pass each one set): routing_key, headers (name to
// value, compared as text), due_before and due_after (exclusive; Unix ms
// or RFC 3339); all (with no filter: everything held) must be set for a
// cancel of everything.
type cancelBody struct {
	IDs        []uint64          `json:"ids"`
	RoutingKey *string           `json:"routing_key"`
	Headers    map[string]string `json:"headers"`
	DueBefore  json.RawMessage   `json:"due_before"`
	DueAfter   json.RawMessage   `json:"due_after"`
	All        bool              `json:"all"`
}

// cancelScheduled is POST /api/exchanges/{vhost}/{name}/scheduled/cancel:
// it cancels the held messages ids names, or those that pass its filters
// (cancelBody), durably, and answers {"cancelled": N}.
func (s *Server) cancelScheduled(u *broker.UserInfo, r *http.Request) (any, error) {
	var body cancelBody
	if err := readJSON(r, &body); err != nil {
		return nil, err
	}
	before, err := dueTime("due_before", body.DueBefore)
	if err != nil {
		return nil, err
	}
	after, err := dueTime("due_after", body.DueAfter)
	if err != nil {
		return nil, err
	}
	f := broker.ScheduledFilter{All: body.All, RoutingKey: body.RoutingKey, Headers: body.Headers, DueBefore: before, DueAfter: after}
	filtered := f.RoutingKey != nil || len(f.Headers) > 0 || before != 0 || after != 0 || f.All
	if len(body.IDs) > 0 && filtered {
		return nil, badRequest("give ids or filters, not both")
	}
	if len(body.IDs) > broker.PeekMaxCount {
		return nil, badRequest("at most %d ids at once", broker.PeekMaxCount)
	}
	if f.RoutingKey != nil {
		if err := checkShort("routing_key", *f.RoutingKey); err != nil {
			return nil, err
		}
	}
	for k, v := range f.Headers {
		if err := checkShort("headers", k); err != nil {
			return nil, err
		}
		if err := checkShort("headers", v); err != nil {
			return nil, err
		}
	}
	n := 0
	err = s.withDirect(u, r.PathValue("vhost"), func(d *broker.Direct) error {
		name := exchangeName(r.PathValue("name"))
		if len(body.IDs) > 0 {
			done, err := d.CancelScheduled(name, body.IDs)
			n = len(done)
			return err
		}
		var err error
		n, err = d.CancelScheduledMatching(name, f)
		return err
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"cancelled": n}, nil
}

// dueTime reads a due_before or due_after: Unix ms (a number or a string
// of digits) or an RFC 3339 time; absent or null is 0 (no bound).
func dueTime(field string, raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, badRequest("%s must be Unix milliseconds or an RFC 3339 time", field)
	}
	switch x := v.(type) {
	case float64:
		if x > 0 && x == float64(int64(x)) {
			return int64(x), nil
		}
	case string:
		if n, err := strconv.ParseInt(x, 10, 64); err == nil && n > 0 {
			return n, nil
		}
		if t, err := time.Parse(time.RFC3339Nano, x); err == nil && t.UnixMilli() > 0 {
			return t.UnixMilli(), nil
		}
	}
	return 0, badRequest("%s must be Unix milliseconds or an RFC 3339 time", field)
}
