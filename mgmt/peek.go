package mgmt

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
)

// peekDefaultCount is a peek's count when the request names none.
const peekDefaultCount = 20

// peekMessages is GET /api/queues/{vhost}/{name}/peek?count=N&from=SEQ
// [&priority=P&truncate=N&encoding=auto|base64]: up to count ready
// messages from the first with seq >= from (with priority, from that
// position in delivery order: level P from seq from, then the lower
// levels), in delivery order, left where they are (no delivery, no
// redelivered flag). It needs the user's read permission on the queue,
// checked as basic.get checks it (401 otherwise). The reply is
// {"messages": [...], "next": SEQ, "next_priority": P}, the from and
// priority of the following page (next 0 at the end). Each message is as
// /get renders it, with "seq" and "priority_level" (and without
// message_count).
func (s *Server) peekMessages(u *broker.UserInfo, r *http.Request) (any, error) {
	qv := r.URL.Query()
	count, from, err := pageQuery(qv, peekDefaultCount, 0, broker.PeekMaxCount)
	if err != nil {
		return nil, err
	}
	prio := -1
	if p := qv.Get("priority"); p != "" {
		n, err := strconv.ParseUint(p, 10, 8)
		if err != nil {
			return nil, badRequest("priority must be a priority level (0 to 255)")
		}
		prio = int(n)
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
	var ms []broker.PeekedMessage
	err = s.withDirect(u, r.PathValue("vhost"), func(d *broker.Direct) error {
		var err error
		// One more than asked: its seq is the next page's from.
		ms, err = d.PeekLevel(r.PathValue("name"), prio, from, count+1)
		return err
	})
	if err != nil {
		return nil, err
	}
	var next uint64
	var nextPrio uint8
	var bytes int64
	for _, m := range ms {
		bytes += int64(len(m.Body))
	}
	switch {
	case len(ms) > count:
		next, nextPrio, ms = ms[count].Seq, ms[count].Priority, ms[:count]
	case len(ms) > 0 && len(ms) < count && bytes >= broker.PeekMaxBytes:
		// Cut by the byte bound: resume past the last.
		next, nextPrio = ms[len(ms)-1].Seq+1, ms[len(ms)-1].Priority
	}
	out := make([]map[string]any, 0, len(ms))
	for _, m := range ms {
		props, err := amqp.DecodeProperties(m.Props)
		if err != nil {
			return nil, err
		}
		ok := &amqp.BasicGetOk{Exchange: m.Exchange, Redelivered: m.Redelivered}
		if len(m.RoutingKeys) > 0 {
			ok.RoutingKey = m.RoutingKeys[0]
		}
		j := messageJSON(ok, props, m.Body, encoding, truncate)
		delete(j, "message_count")
		j["seq"] = m.Seq
		j["priority_level"] = m.Priority
		out = append(out, j)
	}
	return map[string]any{"messages": out, "next": next, "next_priority": nextPrio}, nil
}

// pageQuery reads a paged list's count (def when absent, lo to hi) and
// from (a message seq, 0 when absent) parameters.
func pageQuery(qv url.Values, def, lo, hi int) (count int, from uint64, err error) {
	count = def
	if c := qv.Get("count"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < lo || n > hi {
			return 0, 0, badRequest("count must be an integer from %d to %d", lo, hi)
		}
		count = n
	}
	if f := qv.Get("from"); f != "" {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0, badRequest("from must be a message seq (an unsigned integer)")
		}
		from = n
	}
	return count, from, nil
}
