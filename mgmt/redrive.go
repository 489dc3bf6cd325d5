package mgmt

import (
	"net/http"
	"time"

	"github.com/brokerd/brokerd/broker"
)

// redriveBody is a POST of a redrive. To is "origin" (the default) or
// "exchange" (then Exchange and RoutingKey say where); Max 0 means all;
// MinAgeMS filters on the latest x-death's time.
type redriveBody struct {
	To          string `json:"to"`
	Exchange    string `json:"exchange"`
	RoutingKey  string `json:"routing_key"`
	Max         int    `json:"max"`
	Reason      string `json:"reason"`
	SourceQueue string `json:"source_queue"`
	MinAgeMS    int64  `json:"min_age_ms"`
}

// redrive is POST /api/queues/{vhost}/{name}/redrive: it moves the
// queue's matching ready messages (broker.Direct.Redrive, as the user:
// read on the queue, write on the exchange or each origin queue) before
// it answers, with {"moved", "failed", "failures": [{"seq", "reason"}],
// "remaining"}. It runs synchronously: rate-limited tasks that can be
// listed and cancelled are not implemented yet.
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
	if body.Max < 0 || body.MinAgeMS < 0 {
		return nil, badRequest("max and min_age_ms must not be negative")
	}
	var res broker.RedriveResult
	err := s.withDirect(u, r.PathValue("vhost"), func(d *broker.Direct) error {
		var err error
		res, err = d.Redrive(r.PathValue("name"), opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	failures := make([]map[string]any, 0, len(res.Failures))
	for _, f := range res.Failures {
		failures = append(failures, map[string]any{"seq": f.Seq, "reason": f.Reason})
	}
	return map[string]any{"moved": res.Moved, "failed": res.Failed, "failures": failures, "remaining": res.Remaining}, nil
}
