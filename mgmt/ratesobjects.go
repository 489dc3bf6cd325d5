package mgmt

import (
	"github.com/brokerd/brokerd/broker"
)

// The rates each object shows, added to its JSON by its handler.

// queueRates adds a queue's messages*_details and, to its message_stats,
// the rates of the counters it holds.
func (s *Server) queueRates(m map[string]any, vhost, name string, rq rateQuery) {
	s.withRates(func(sm *sampler) {
		sr := sm.queues[[2]string{vhost, name}]
		sm.detailsLocked(m, lengthFields, []*series{sr}, rq.lengths, basicRetention)
		if ms, ok := m["message_stats"].(map[string]any); ok {
			sm.detailsLocked(ms, msgFields, []*series{sr}, rq.msg, basicRetention)
		}
	})
}

// exchangeRates gives an exchange that has had publishes RabbitMQ's
// message_stats: publish_in and publish_out, with their rates.
func (s *Server) exchangeRates(m map[string]any, xi broker.ExchangeInfo, rq rateQuery) {
	if xi.PublishIn == 0 {
		return
	}
	ms := map[string]any{"publish_in": xi.PublishIn, "publish_out": xi.PublishOut}
	m["message_stats"] = ms
	s.withRates(func(sm *sampler) {
		sm.detailsLocked(ms, exchangeFields, []*series{sm.exchanges[[2]string{xi.VHost, xi.Name}]}, rq.msg, basicRetention)
	})
}

// vhostRates adds a vhost's messages*_details and, once it has had
// traffic, its message_stats (its exchanges' publishes, its channels'
// confirms and unroutable publishes, its queues' deliveries) and its
// connections' recv_oct and send_oct, all summed from its objects'
// samples (rates.go).
func (s *Server) vhostRates(m map[string]any, name string, rq rateQuery) {
	s.withRates(func(sm *sampler) {
		v := sm.vhosts[name]
		var sr *series
		if v != nil {
			sr = v.s
			t := &v.totals
			ms := map[string]any{}
			for key, cols := range msgFields {
				var n int64
				for _, c := range cols {
					n += t[c]
				}
				ms[key] = n
			}
			var any int64
			for _, c := range []int{cPublish, cDeliver, cDeliverNoAck, cGet, cGetNoAck, cGetEmpty, cAck} {
				any += t[c]
			}
			if any > 0 {
				sm.detailsLocked(ms, msgFields, []*series{sr}, rq.msg, globalRetention)
				m["message_stats"] = ms
			}
			if t[cRecvOct]+t[cSendOct] > 0 {
				m["recv_oct"], m["send_oct"] = t[cRecvOct], t[cSendOct]
				sm.detailsLocked(m, dataFields, []*series{sr}, rq.data, globalRetention)
			}
		}
		sm.detailsLocked(m, lengthFields, []*series{sr}, rq.lengths, globalRetention)
	})
}

// connRates adds a connection's traffic counters and the rates of its
// bytes.
func (s *Server) connRates(m map[string]any, ci broker.ConnectionInfo, rq rateQuery) {
	m["recv_oct"], m["recv_cnt"], m["send_oct"], m["send_cnt"] = ci.RecvOct, ci.RecvCnt, ci.SendOct, ci.SendCnt
	s.withRates(func(sm *sampler) {
		sm.detailsLocked(m, connFields, []*series{sm.conns[ci.Name]}, rq.data, basicRetention)
	})
}

// channelRates gives a channel that published or delivered its
// message_stats, with their rates.
func (s *Server) channelRates(m map[string]any, ch broker.ChannelInfo, rq rateQuery) {
	ms := map[string]any{}
	if ch.Published > 0 {
		ms["publish"], ms["confirm"] = ch.Published, ch.Confirmed
		ms["return_unroutable"], ms["drop_unroutable"] = ch.ReturnUnroutable, ch.DropUnroutable
	}
	deliveryStats(ms, ch.Deliveries)
	if len(ms) == 0 {
		return
	}
	m["message_stats"] = ms
	s.withRates(func(sm *sampler) {
		sm.detailsLocked(ms, channelFields, []*series{sm.channels[ch.Name]}, rq.msg, basicRetention)
	})
}

// overviewRates adds the rates of the overview's message_stats (the
// broker's) and of its queue_totals (the vhosts the user sees).
func (s *Server) overviewRates(m map[string]any, vhosts []string, rq rateQuery) {
	m["sample_retention_policies"] = retentionJSON
	s.withRates(func(sm *sampler) {
		if ms, ok := m["message_stats"].(map[string]any); ok {
			sm.detailsLocked(ms, msgFields, []*series{sm.overview}, rq.msg, globalRetention)
		}
		if qt, ok := m["queue_totals"].(map[string]any); ok {
			refs := make([]*series, 0, len(vhosts))
			for _, v := range vhosts {
				if vs := sm.vhosts[v]; vs != nil {
					refs = append(refs, vs.s)
				}
			}
			sm.detailsLocked(qt, lengthFields, refs, rq.lengths, globalRetention)
		}
	})
}

// nodeRates adds the rates of the node's sampled figures.
func (s *Server) nodeRates(m map[string]any, rq rateQuery) {
	s.withRates(func(sm *sampler) {
		sm.detailsLocked(m, nodeFields, []*series{sm.node}, rq.node, globalRetention)
	})
}
