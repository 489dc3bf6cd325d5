package mgmt

import (
	"net/http"
	"time"

	"github.com/brokerd/brokerd/broker"
)

// redriveBody is a POST of a redrive. To is "origin" (the default: the
// queue the broker recorded when it dead-lettered each message, never its
// x-death) or "exchange" (then Exchange and RoutingKey say where); Max 0
// means all; Reason, SourceQueue and MinAgeMS filter on the latest death
// (see broker.RedriveOptions); Rate 0 is unpaced.
type redriveBody struct {
	To          string  `json:"to"`
	Exchange    string  `json:"exchange"`
	RoutingKey  string  `json:"routing_key"`
	Max         int     `json:"max"`
	Rate        float64 `json:"rate"`
	Reason      string  `json:"reason"`
	SourceQueue string  `json:"source_queue"`
	MinAgeMS    int64   `json:"min_age_ms"`
}

// redrive is POST /api/queues/{vhost}/{name}/redrive: it starts a redrive
// task (broker.Direct.StartRedrive, as the user: read on the queue, write
// on the exchange or on each origin queue) and answers 201 with the task
// and its Location, /api/redrives/{id}, to watch or cancel it.
func (s *Server) redrive(u *broker.UserInfo, r *http.Request) (any, error) {
	var body redriveBody
	if err := readJSON(r, &body); err != nil {
		return nil, err
	}
	opts := broker.RedriveOptions{
		Max: body.Max, Reason: body.Reason, SourceQueue: body.SourceQueue,
		MinAge: time.Duration(body.MinAgeMS) * time.Millisecond,
	}
	switch body.To {
	case "", "origin":
		if body.Exchange != "" || body.RoutingKey != "" {
			return nil, badRequest("exchange and routing_key need \"to\": \"exchange\"")
		}
	case "exchange":
		opts.ToExchange, opts.Exchange, opts.RoutingKey = true, exchangeName(body.Exchange), body.RoutingKey
	default:
		return nil, badRequest("to must be origin or exchange")
	}
	for _, f := range [][2]string{{"exchange", body.Exchange}, {"routing_key", body.RoutingKey}, {"reason", body.Reason}, {"source_queue", body.SourceQueue}} {
		if err := checkShort(f[0], f[1]); err != nil {
			return nil, err
		}
	}
	if body.Max < 0 || body.MinAgeMS < 0 || body.Rate < 0 {
		return nil, badRequest("max, rate and min_age_ms must not be negative")
	}
	var id string
	err := s.withDirect(u, r.PathValue("vhost"), func(d *broker.Direct) error {
		var err error
		id, err = d.StartRedrive(r.PathValue("name"), opts, body.Rate)
		return err
	})
	if err != nil {
		return nil, err
	}
	t, err := s.b.RedriveTask(id)
	if err != nil {
		return nil, err
	}
	return createdAt{location: "/api/redrives/" + id, body: redriveJSON(t)}, nil
}

// redriveJSON is a task as the API shows it.
func redriveJSON(t broker.RedriveTask) map[string]any {
	to := "origin"
	if t.ToExchange || t.Exchange != "" {
		to = "exchange"
	}
	failures := make([]map[string]any, 0, len(t.Failures))
	for _, f := range t.Failures {
		failures = append(failures, map[string]any{"seq": f.Seq, "reason": f.Reason})
	}
	m := map[string]any{
		"id":              t.ID,
		"vhost":           t.VHost,
		"queue":           t.Queue,
		"user":            t.User,
		"to":              to,
		"exchange":        t.Exchange,
		"routing_key":     t.RoutingKey,
		"max":             t.Max,
		"rate":            t.Rate,
		"reason":          t.Reason,
		"source_queue":    t.SourceQueue,
		"min_age_ms":      t.MinAge.Milliseconds(),
		"state":           t.State,
		"moved":           t.Moved,
		"failed":          t.Failed,
		"remaining":       t.Remaining,
		"failures":        failures,
		"failure_reasons": t.FailureReasons,
		"error":           t.Error,
		"created_at":      t.Created.UTC().Format(time.RFC3339Nano),
		"ended_at":        nil,
	}
	if to == "exchange" && t.Exchange == "" {
		m["exchange"] = "amq.default"
	}
	if !t.Ended.IsZero() {
		m["ended_at"] = t.Ended.UTC().Format(time.RFC3339Nano)
	}
	return m
}

// mayWatch reports whether u sees task t: administrator and monitoring
// users see every task (as every vhost's queues), others their own and
// those of the vhosts they have permissions in.
func (s *Server) mayWatch(u *broker.UserInfo, t broker.RedriveTask) bool {
	return hasTag(u, "administrator", "monitoring") || t.User == u.Name || s.canAccessVHost(u, t.VHost)
}

// redrives is GET /api/redrives: every task u may see, oldest first.
func (s *Server) redrives(u *broker.UserInfo, r *http.Request) (any, error) {
	out := []map[string]any{}
	for _, t := range s.b.RedriveTasks() {
		if s.mayWatch(u, t) {
			out = append(out, redriveJSON(t))
		}
	}
	return out, nil
}

// redriveTask is GET /api/redrives/{id}.
func (s *Server) redriveTask(u *broker.UserInfo, r *http.Request) (any, error) {
	t, err := s.b.RedriveTask(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if !s.mayWatch(u, t) {
		return nil, notFound()
	}
	return redriveJSON(t), nil
}

// cancelRedrive is DELETE /api/redrives/{id}: it cancels a running task
// (after the move under way; moves made stay) and leaves an ended one as
// it is; with ?forget=true it also removes the task. Only the task's user
// or an administrator may.
func (s *Server) cancelRedrive(u *broker.UserInfo, r *http.Request) (any, error) {
	t, err := s.b.RedriveTask(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if !s.mayWatch(u, t) {
		return nil, notFound()
	}
	if !hasTag(u, "administrator") && t.User != u.Name {
		return nil, notAuthorised(notAuthorisedObject)
	}
	act := s.b.CancelRedrive
	switch r.URL.Query().Get("forget") {
	case "", "false":
	case "true":
		act = s.b.ForgetRedrive
	default:
		return nil, badRequest("forget must be true or false")
	}
	if err := act(t.ID); err != nil {
		return nil, err
	}
	return noContent{}, nil
}

// redriveFailures is GET /api/redrives/{id}/failures?from=SEQ&count=N:
// every failure of a task (the task lists only its first ones), by seq,
// {"failures": [{"seq", "reason"}], "next": SEQ} (next 0 at the end).
func (s *Server) redriveFailures(u *broker.UserInfo, r *http.Request) (any, error) {
	t, err := s.b.RedriveTask(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if !s.mayWatch(u, t) {
		return nil, notFound()
	}
	count, from, err := pageQuery(r.URL.Query(), 100, 1, broker.RedriveMaxFailuresPage)
	if err != nil {
		return nil, err
	}
	fs, err := s.b.RedriveFailures(t.ID, from, count+1) // one more: the next page's from
	if err != nil {
		return nil, err
	}
	var next uint64
	if len(fs) > count {
		next, fs = fs[count].Seq, fs[:count]
	}
	out := make([]map[string]any, 0, len(fs))
	for _, f := range fs {
		out = append(out, map[string]any{"seq": f.Seq, "reason": f.Reason})
	}
	return map[string]any{"failures": out, "next": next}, nil
}
