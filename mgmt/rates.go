package mgmt

import (
	"slices"
	"sync"
	"time"

	"github.com/brokerd/brokerd/broker"
)

// Message rates, as RabbitMQ's management plugin computes them
// (rates_mode basic): a sampler goroutine reads every object's counters
// (Broker.Counters: atomic loads and a lock per queue, no work per
// message) every Options.SampleInterval (RabbitMQ's
// collect_statistics_interval, 5 s) and keeps, per object, the samples
// RabbitMQ's default sample_retention_policies keep:
//
//	basic (queues, exchanges, connections, channels)  every 5 s for 605 s, every 60 s for 3600 s
//	global (vhosts, the overview, the node)           every 5 s for 605 s, every 60 s for 3660 s,
//	                                                  every 600 s for 29400 s, every 1800 s for 86400 s
//
// A sample equal to the one before it is not stored (RabbitMQ's slides
// drop them too), so an idle object holds one sample per level whatever
// its age, and a busy one at most the levels' capacities: 123 + 62
// samples for a queue (11 counters each, some 18 KiB).
//
// A rate is computed from samples as rabbit_mgmt_stats does. Without
// range parameters, *_details is {"rate": r}, r the change between the
// last two samples per second (0 unless the last sample is at most one
// interval old). With msg_rates_age and msg_rates_incr (message counters),
// lengths_age/lengths_incr (queue lengths) or data_rates_age/
// data_rates_incr (bytes), in seconds, it also has "samples" (the value
// every incr seconds over the last age seconds, newest first), "avg_rate"
// and "avg", and the rate is the change over the last incr; a range of
// more than 500 points, or a non-positive age or incr, is a 400
// "Invalid range parameters". The counts shown next to the rates are read
// when asked, not sampled.
//
// A vhost's counts are the sum of its objects' changes between samples
// (RabbitMQ's vhost stats are fed the same way): an object deleted
// between two samples loses what it counted since the last one.

// level is one retention level: a sample every `every` ms, kept `keep`
// ms.
type level struct{ every, keep int64 }

var (
	basicRetention  = []level{{5000, 605000}, {60000, 3600000}}
	globalRetention = []level{{5000, 605000}, {60000, 3660000}, {600000, 29400000}, {1800000, 86400000}}
)

// retentionJSON is /api/overview's sample_retention_policies: each
// level's age, as RabbitMQ rounds them (transform_retention_intervals).
var retentionJSON = map[string]any{"global": []int{600, 3600, 28800, 86400}, "basic": []int{600, 3600}, "detailed": []int{600}}

// ring is one level's samples, oldest first, in a ring of at most cap:
// only samples that differ from the one before are stored, so a sample
// stands for every tick from its time until the next one's.
type ring struct {
	every int64
	cap   int
	last  int64 // time of the level's last tick (stored or not); 0: none
	ts    []int64
	vals  []int64 // width values per sample
	start int     // index of the oldest, once full
	width int
}

func (r *ring) n() int { return len(r.ts) }

// at returns the i-th sample, 0 the oldest.
func (r *ring) at(i int) (int64, []int64) {
	j := (r.start + i) % len(r.ts)
	return r.ts[j], r.vals[j*r.width : (j+1)*r.width]
}

// add takes a tick's values if the level is due (every `every` ms).
func (r *ring) add(ts int64, vals []int64) {
	if r.last != 0 && ts-r.last < r.every {
		return
	}
	r.last = ts
	if n := r.n(); n > 0 {
		if _, newest := r.at(n - 1); slices.Equal(newest, vals) {
			return
		}
	}
	if len(r.ts) < r.cap {
		if len(r.ts) == cap(r.ts) {
			// Grown by hand to at most cap: append's growth would
			// overshoot it by up to half.
			n := min(max(2*len(r.ts), 4), r.cap)
			r.ts = append(make([]int64, 0, n), r.ts...)
			r.vals = append(make([]int64, 0, n*r.width), r.vals...)
		}
		r.ts = append(r.ts, ts)
		r.vals = append(r.vals, vals...)
		return
	}
	r.ts[r.start] = ts
	copy(r.vals[r.start*r.width:], vals)
	r.start = (r.start + 1) % r.cap
}

// valueAt returns the values at time t: the newest sample at or before
// it; nil before the oldest.
func (r *ring) valueAt(t int64) []int64 {
	lo, hi := 0, r.n() // find the first sample later than t
	for lo < hi {
		m := (lo + hi) / 2
		if ts, _ := r.at(m); ts <= t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return nil
	}
	_, v := r.at(lo - 1)
	return v
}

// series is the sampled history of one object's counters.
type series struct {
	id    uint64 // the object's identity where names are reused (a queue's id)
	width int
	rings []ring
	first int64 // the first tick that saw the object
	// last and prev are the two latest ticks of the finest level: the
	// instant rate is taken between them.
	last, prev int64
}

func newSeries(width int, policy []level, interval int64) *series {
	s := &series{width: width, rings: make([]ring, len(policy))}
	for i, l := range policy {
		// A level takes at most a sample per `every`; with a longer
		// interval it takes one per tick, and keeps them as long.
		s.rings[i] = ring{every: l.every, cap: int(l.keep/max(l.every, interval)) + 2, width: width}
	}
	return s
}

func (s *series) add(ts int64, vals []int64) {
	if s.first == 0 {
		s.first = ts
	}
	s.prev, s.last = s.last, ts
	for i := range s.rings {
		s.rings[i].add(ts, vals)
	}
}

// newest returns the latest values.
func (s *series) newest() []int64 {
	r := &s.rings[0]
	_, v := r.at(r.n() - 1)
	return v
}

// ringFor returns the finest level that keeps age ms, or the coarsest.
func (s *series) ringFor(age int64, policy []level) *ring {
	for i, l := range policy {
		if l.keep >= age {
			return &s.rings[i]
		}
	}
	return &s.rings[len(s.rings)-1]
}

// at returns column c's value at time t in ring r: 0 before the object
// was first seen, the newest value after the last tick.
func (s *series) at(r *ring, c []int, t int64) int64 {
	if t < s.first {
		return 0
	}
	v := r.valueAt(t)
	if v == nil {
		_, v = r.at(0) // before what the level keeps: its oldest
	}
	var sum int64
	for _, i := range c {
		sum += v[i]
	}
	return sum
}

// Columns of the samples. A queue's are the first qWidth of a vhost's
// (and the overview's), so one field table serves all three.
const (
	cReady = iota
	cUnacked
	cMessages
	cPublish
	cDeliver
	cDeliverNoAck
	cGet
	cGetNoAck
	cGetEmpty
	cRedeliver
	cAck
	qWidth   // a queue's columns end here
	cConfirm = iota - 1
	cReturn
	cDrop
	cRecvOct
	cSendOct
	vWidth
)

// Field tables: a JSON field and the columns whose sum it is.
var (
	msgFields = map[string][]int{
		"publish": {cPublish}, "deliver": {cDeliver}, "deliver_no_ack": {cDeliverNoAck}, "get": {cGet},
		"get_no_ack": {cGetNoAck}, "get_empty": {cGetEmpty}, "redeliver": {cRedeliver}, "ack": {cAck},
		"deliver_get": {cDeliver, cDeliverNoAck, cGet, cGetNoAck},
		"confirm":     {cConfirm}, "return_unroutable": {cReturn}, "drop_unroutable": {cDrop},
	}
	lengthFields   = map[string][]int{"messages_ready": {cReady}, "messages_unacknowledged": {cUnacked}, "messages": {cMessages}}
	dataFields     = map[string][]int{"recv_oct": {cRecvOct}, "send_oct": {cSendOct}}
	exchangeFields = map[string][]int{"publish_in": {0}, "publish_out": {1}}
	channelFields  = map[string][]int{"publish": {0}, "confirm": {1}, "return_unroutable": {2}, "drop_unroutable": {3},
		"deliver": {4}, "deliver_no_ack": {5}, "get": {6}, "get_no_ack": {7}, "get_empty": {8}, "redeliver": {9}, "ack": {10},
		"deliver_get": {4, 5, 6, 7}}
	connFields = map[string][]int{"recv_oct": {0}, "send_oct": {2}}
	nodeFields = map[string][]int{"mem_used": {0}, "fd_used": {1}, "sockets_used": {2}, "proc_used": {3}, "disk_free": {4},
		"gc_num": {5}, "gc_bytes_reclaimed": {6}, "context_switches": {7}}
)

// sampler takes the samples and answers for them. Safe for concurrent
// use.
type sampler struct {
	b        *broker.Broker
	interval int64 // ms
	now      func() time.Time
	readNode func() nodeStats

	mu        sync.Mutex
	overview  *series
	node      *series
	vhosts    map[string]*vhostSeries
	queues    map[[2]string]*series
	exchanges map[[2]string]*series
	conns     map[string]*series
	channels  map[string]*series
}

// vhostSeries is a vhost's samples and its running totals: the sum of
// its objects' changes since the sampler started.
type vhostSeries struct {
	s      *series
	totals [vWidth]int64
}

func newSampler(b *broker.Broker, interval time.Duration, now func() time.Time, readNode func() nodeStats) *sampler {
	return &sampler{b: b, interval: interval.Milliseconds(), now: now, readNode: readNode,
		vhosts: map[string]*vhostSeries{}, queues: map[[2]string]*series{}, exchanges: map[[2]string]*series{},
		conns: map[string]*series{}, channels: map[string]*series{}}
}

// run samples at every tick (every interval, unless ticks are given)
// until stop is closed.
func (sm *sampler) run(ticks <-chan time.Time, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	if ticks == nil {
		t := time.NewTicker(time.Duration(sm.interval) * time.Millisecond)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-stop:
			return
		case <-ticks:
			sm.sample(sm.now())
		}
	}
}

// track returns the series of an object in m (created if new, or if the
// object is not the one sampled before: another id, or a counter of
// cols gone back) and the change of its counters since its last sample.
func track[K comparable](sm *sampler, m map[K]*series, k K, id uint64, vals []int64, counters []int, policy []level) (*series, []int64) {
	delta := make([]int64, len(vals))
	s := m[k]
	if s != nil && s.id == id {
		old := s.newest()
		for _, c := range counters {
			if vals[c] < old[c] {
				s = nil // a new object of the same name: its counters started again
				break
			}
			delta[c] = vals[c] - old[c]
		}
	} else {
		s = nil
	}
	if s == nil {
		s = newSeries(len(vals), policy, sm.interval)
		s.id = id
		m[k] = s
		for _, c := range counters {
			delta[c] = vals[c]
		}
	}
	return s, delta
}

var (
	queueCounters = []int{cPublish, cDeliver, cDeliverNoAck, cGet, cGetNoAck, cGetEmpty, cRedeliver, cAck}
	allOf2        = []int{0, 1}
	allOf4        = []int{0, 1, 2, 3}
	allOf11       = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
)

// sample takes one sample of every object at now.
func (sm *sampler) sample(now time.Time) {
	ts := now.UnixMilli()
	c := sm.b.Counters()
	var ns nodeStats
	if sm.readNode != nil {
		ns = sm.readNode()
	}
	sm.mu.Lock()
	defer sm.mu.Unlock()
	vh := func(name string) *vhostSeries {
		v := sm.vhosts[name]
		if v == nil {
			v = &vhostSeries{s: newSeries(vWidth, globalRetention, sm.interval)}
			sm.vhosts[name] = v
		}
		return v
	}
	seenVHosts := map[string]bool{}
	lengths := map[string]*[3]int64{}
	seenQ := map[[2]string]bool{}
	for _, q := range c.Queues {
		k := [2]string{q.VHost, q.Name}
		st := q.Stats
		vals := []int64{int64(q.Ready), int64(q.Unacked), int64(q.Ready + q.Unacked + q.Backlog), int64(st.Publish),
			int64(st.Deliver), int64(st.DeliverNoAck), int64(st.Get), int64(st.GetNoAck), int64(st.GetEmpty), int64(st.Redeliver), int64(st.Ack)}
		s, delta := track(sm, sm.queues, k, q.ID, vals, queueCounters, basicRetention)
		s.add(ts, vals)
		seenQ[k] = true
		v := vh(q.VHost)
		for _, col := range queueCounters[1:] { // a vhost's publishes are its exchanges'
			v.totals[col] += delta[col]
		}
		l := lengths[q.VHost]
		if l == nil {
			l = new([3]int64)
			lengths[q.VHost] = l
		}
		for i := range l {
			l[i] += vals[i]
		}
	}
	seenX := map[[2]string]bool{}
	for _, x := range c.Exchanges {
		k := [2]string{x.VHost, x.Name}
		vals := []int64{int64(x.PublishIn), int64(x.PublishOut)}
		s, delta := track(sm, sm.exchanges, k, 0, vals, allOf2, basicRetention)
		s.add(ts, vals)
		seenX[k] = true
		seenVHosts[x.VHost] = true // every vhost has its default exchange
		vh(x.VHost).totals[cPublish] += delta[0]
	}
	seenC := map[string]bool{}
	for _, cc := range c.Conns {
		vals := []int64{int64(cc.RecvOct), int64(cc.RecvCnt), int64(cc.SendOct), int64(cc.SendCnt)}
		s, delta := track(sm, sm.conns, cc.Name, 0, vals, allOf4, basicRetention)
		s.add(ts, vals)
		seenC[cc.Name] = true
		v := vh(cc.VHost)
		v.totals[cRecvOct] += delta[0]
		v.totals[cSendOct] += delta[2]
	}
	seenCh := map[string]bool{}
	for _, ch := range c.Channels {
		d := ch.Deliveries
		vals := []int64{int64(ch.Publish), int64(ch.Confirm), int64(ch.Returned), int64(ch.Dropped),
			int64(d.Deliver), int64(d.DeliverNoAck), int64(d.Get), int64(d.GetNoAck), int64(d.GetEmpty), int64(d.Redeliver), int64(d.Ack)}
		s, delta := track(sm, sm.channels, ch.Name, 0, vals, allOf11, basicRetention)
		s.add(ts, vals)
		seenCh[ch.Name] = true
		v := vh(ch.VHost)
		v.totals[cConfirm] += delta[1]
		v.totals[cReturn] += delta[2]
		v.totals[cDrop] += delta[3]
	}
	deleteUnseen(sm.queues, seenQ)
	deleteUnseen(sm.exchanges, seenX)
	deleteUnseen(sm.conns, seenC)
	deleteUnseen(sm.channels, seenCh)

	var all [vWidth]int64
	for name, v := range sm.vhosts {
		if !seenVHosts[name] {
			delete(sm.vhosts, name)
			continue
		}
		l := lengths[name]
		if l == nil {
			l = new([3]int64)
		}
		copy(v.totals[:3], l[:])
		v.s.add(ts, v.totals[:])
		for i := range all {
			all[i] += v.totals[i]
		}
	}
	st := c.Stats
	d := st.Delivered
	ov := []int64{all[cReady], all[cUnacked], all[cMessages], int64(st.Published),
		int64(d[broker.DeliveredConsumeManualAck]), int64(d[broker.DeliveredConsumeAutoAck]), int64(d[broker.DeliveredGetManualAck]),
		int64(d[broker.DeliveredGetAutoAck]), int64(st.GetEmpty), int64(st.Redelivered), int64(st.Acknowledged),
		int64(st.Confirmed), int64(st.Returned), int64(st.Unroutable - st.Returned), all[cRecvOct], all[cSendOct]}
	if sm.overview == nil {
		sm.overview = newSeries(vWidth, globalRetention, sm.interval)
	}
	sm.overview.add(ts, ov)
	if sm.node == nil {
		sm.node = newSeries(8, globalRetention, sm.interval)
	}
	sm.node.add(ts, []int64{int64(ns.memUsed), int64(ns.fdUsed), int64(ns.socketsUsed), int64(ns.procUsed), int64(ns.diskFree),
		int64(ns.gcNum), int64(ns.gcBytesReclaimed), int64(ns.contextSwitches)})
}

func deleteUnseen[K comparable](m map[K]*series, seen map[K]bool) {
	for k := range m {
		if !seen[k] {
			delete(m, k)
		}
	}
}
