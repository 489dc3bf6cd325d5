package mgmt

import (
	"net/http"
	"strconv"
)

// How samples become the *_details of the API's objects (rates.go says
// what they are).

// maxRange bounds the points a range asks for, as RabbitMQ's MAX_RANGE.
const maxRange = 500

// rateRange is a range of samples asked for: age and incr in ms.
type rateRange struct{ age, incr int64 }

// rateQuery is what one request asks of the rates: a range per kind of
// figure (nil: the instant rate only), and the time it is answered at.
type rateQuery struct {
	msg, lengths, data, node *rateRange
}

// parseRates reads the request's range parameters as RabbitMQ's
// rabbit_mgmt_util:range does: a prefix whose _age and _incr are not both
// integers asks for no range; both must be positive with at most 500
// points, or the request is a 400.
func parseRates(r *http.Request) (rateQuery, error) {
	var q rateQuery
	for _, p := range []struct {
		prefix string
		dst    **rateRange
	}{{"msg_rates", &q.msg}, {"lengths", &q.lengths}, {"data_rates", &q.data}, {"node_stats", &q.node}} {
		v := r.URL.Query()
		age, err1 := strconv.ParseInt(v.Get(p.prefix+"_age"), 10, 64)
		incr, err2 := strconv.ParseInt(v.Get(p.prefix+"_incr"), 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if age <= 0 || incr <= 0 || age/incr > maxRange {
			return q, badRequest("Invalid range parameters: age %d, incr %d", age, incr)
		}
		*p.dst = &rateRange{age: age * 1000, incr: incr * 1000}
	}
	return q, nil
}

// detailsLocked adds to m, for every key of fields m holds, key_details
// from the samples of refs (their sum; a nil series counts 0) as rg asks.
// Caller holds sm.mu.
func (sm *sampler) detailsLocked(m map[string]any, fields map[string][]int, refs []*series, rg *rateRange, policy []level) {
	now := sm.now().UnixMilli()
	for key, cols := range fields {
		if _, ok := m[key]; !ok {
			continue
		}
		m[key+"_details"] = sm.detailLocked(refs, cols, rg, policy, now)
	}
}

// detailLocked is one field's details.
func (sm *sampler) detailLocked(refs []*series, cols []int, rg *rateRange, policy []level, now int64) map[string]any {
	if rg == nil {
		var rate float64
		for _, s := range refs {
			rate += sm.instantLocked(s, cols, now)
		}
		return map[string]any{"rate": rate}
	}
	last := now / rg.incr * rg.incr
	n := int(rg.age/rg.incr) + 1
	vals := make([]int64, n)
	samples := make([]map[string]any, n)
	var sum int64
	for k := range n {
		t := last - int64(k)*rg.incr
		for _, s := range refs {
			if s != nil {
				vals[k] += s.at(s.ringFor(rg.age, policy), cols, t)
			}
		}
		samples[k] = map[string]any{"sample": vals[k], "timestamp": t}
		sum += vals[k]
	}
	d := map[string]any{"rate": 0.0, "samples": samples}
	if n > 1 {
		d["rate"] = float64(vals[0]-vals[1]) * 1000 / float64(rg.incr)
		d["avg_rate"] = float64(vals[0]-vals[n-1]) * 1000 / float64(rg.age)
		d["avg"] = float64(sum) / float64(n)
	}
	return d
}

// instantLocked is a series' rate between its last two samples, 0 unless
// the last is at most one interval old (rabbit_mgmt_stats
// format_no_range).
func (sm *sampler) instantLocked(s *series, cols []int, now int64) float64 {
	if s == nil || s.prev == 0 || s.last == s.prev {
		return 0
	}
	if s.last < now/sm.interval*sm.interval-sm.interval {
		return 0
	}
	r := &s.rings[0]
	return float64(s.at(r, cols, s.last)-s.at(r, cols, s.prev)) * 1000 / float64(s.last-s.prev)
}

// withRates runs fn with the sampler locked, if rates are kept (nil
// otherwise: rates_mode none shows the counts without details).
func (s *Server) withRates(fn func(sm *sampler)) {
	if s.rates == nil {
		return
	}
	s.rates.mu.Lock()
	defer s.rates.mu.Unlock()
	fn(s.rates)
}

// rateQueryOf is parseRates for a handler: the query is read once per
// request by handle, which refuses a bad one.
func rateQueryOf(r *http.Request) rateQuery {
	q, _ := r.Context().Value(rateQueryKey{}).(rateQuery)
	return q
}

type rateQueryKey struct{}
