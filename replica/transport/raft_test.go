package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/brokerd/brokerd/replica"
	"github.com/brokerd/brokerd/replica/replicatest"
	pb "go.etcd.io/raft/v3/raftpb"
)

var _ replica.Transport = Sender{}

// member is one replica.Group member driven by its own loop goroutine,
// which owns the group: ticks, messages from the transport, and closures
// the test sends run there, each followed by Process until nothing is
// ready.
type member struct {
	n     *node
	g     *replica.Group
	msgs  chan *pb.Message
	calls chan func()
	stop  chan struct{}
	done  chan struct{}

	// What the loop publishes for the test goroutine, under the shared
	// state's lock.
	st      *raftState
	lead    uint64
	applied [][]byte
}

// raftState guards every member's published fields, with one event for
// any change, so a wait can look at several members.
type raftState struct {
	mu      sync.Mutex
	changed signal
}

func (s *raftState) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	awaitUnder(t, &s.mu, &s.changed, 2*waitFor, cond, func() string { return fmt.Sprintf("%s did not happen in %v", what, 2*waitFor) })
}

const raftGroup = 9

func startMember(t *testing.T, st *raftState, n *node, ids []uint64, tick time.Duration) *member {
	m := &member{n: n, msgs: make(chan *pb.Message, 4096), calls: make(chan func(), 16),
		stop: make(chan struct{}), done: make(chan struct{}), st: st}
	g, err := replica.NewGroup(replica.Config{
		ID: n.id, Peers: ids, ElectionTick: 10, HeartbeatTick: 1,
		Storage: replicatest.NewMemLog(), Transport: n.tr.Group(raftGroup),
		Apply: func(_ uint64, payload []byte) {
			st.mu.Lock()
			m.applied = append(m.applied, slices.Clone(payload))
			st.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	m.g = g
	n.onRecv = func(r recv) bool {
		if r.group == raftGroup {
			select {
			case m.msgs <- r.m:
			default: // the loop is behind: dropped, as a network would (Raft retransmits)
			}
		}
		return false
	}
	go m.loop(t, tick)
	return m
}

func (m *member) loop(t *testing.T, tick time.Duration) {
	defer close(m.done)
	// Time is the point: Raft's clock. A tick of tick, elections after
	// 10 to 20 of them.
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
			m.g.Tick()
		case msg := <-m.msgs:
			_ = m.g.Step(msg) // a stale message is raft's to refuse
		case f := <-m.calls:
			f()
		case <-m.stop:
			return
		}
		for {
			did, err := m.g.Process()
			if err != nil {
				t.Errorf("member %d: %v", m.n.id, err)
				return
			}
			if !did {
				break
			}
		}
		lead, _ := m.g.Leader()
		m.st.mu.Lock()
		m.lead = lead
		m.st.changed.fire()
		m.st.mu.Unlock()
	}
}

// call runs f on the member's loop (not if the loop ended).
func (m *member) call(f func()) {
	done := make(chan struct{})
	select {
	case m.calls <- func() { f(); close(done) }:
		<-done
	case <-m.done:
	}
}

// proposals tracks values proposed and how each ended.
type proposals struct {
	mu        sync.Mutex
	confirmed map[string]bool
	failed    map[string]int // failures (the value was proposed again)
	pending   map[string]bool
	changed   signal
}

func newProposals() *proposals {
	return &proposals{confirmed: map[string]bool{}, failed: map[string]int{}, pending: map[string]bool{}}
}

func (p *proposals) done(v []byte) func(error) {
	return func(err error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.pending, string(v))
		if err == nil {
			p.confirmed[string(v)] = true
		} else {
			p.failed[string(v)]++
		}
		p.changed.fire()
	}
}

// propose proposes every value of vals not yet confirmed nor pending at
// the member that leads, until all are confirmed; it returns the leader
// that confirmed the last.
func (p *proposals) proposeAll(t *testing.T, ms []*member, vals [][]byte) {
	t.Helper()
	deadline := time.Now().Add(2 * waitFor)
	for {
		p.mu.Lock()
		var todo [][]byte
		for _, v := range vals {
			if !p.confirmed[string(v)] && !p.pending[string(v)] {
				todo = append(todo, v)
			}
		}
		all := true
		for _, v := range vals {
			all = all && p.confirmed[string(v)]
		}
		changed := p.changed.next()
		p.mu.Unlock()
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("proposals not all confirmed in %v", 2*waitFor)
		}
		if len(todo) > 0 {
			lead := leaderOf(t, ms)
			lead.call(func() {
				for _, v := range todo {
					p.mu.Lock()
					p.pending[string(v)] = true
					p.mu.Unlock()
					if err := lead.g.Propose(v, p.done(v)); err != nil {
						// Not the leader any more (or raft refused): try again.
						p.mu.Lock()
						delete(p.pending, string(v))
						p.mu.Unlock()
						if !errors.Is(err, replica.ErrNotLeader) {
							t.Logf("propose: %v", err)
						}
						return
					}
				}
			})
			continue
		}
		select {
		case <-changed:
		case <-time.After(time.Until(deadline)):
		}
	}
}

// leaderOf waits for a member of ms that leads by its own account.
func leaderOf(t *testing.T, ms []*member) *member {
	t.Helper()
	var lead *member
	ms[0].st.await(t, "a leader", func() bool {
		for _, m := range ms {
			if m.lead == m.n.id {
				lead = m
				return true
			}
		}
		return false
	})
	return lead
}

// A 3-member replica.Group over three transports, each link through a
// fault proxy: a leader is elected and 1000 proposals commit, applied in
// the same order everywhere; with every link of the leader cut, the other
// two elect a new leader and commit, the old one confirms nothing it is
// asked after the cut; healed, it catches up.
func TestRaftGroupOverTransport(t *testing.T) {
	c := newCluster(t, clusterOpts{n: 3, proxies: true})
	c.connected(t)
	ids := []uint64{1, 2, 3}
	ms := make([]*member, 3)
	st := &raftState{}
	for i, n := range c.nodes {
		ms[i] = startMember(t, st, n, ids, 20*time.Millisecond)
	}
	defer func() {
		for _, m := range ms {
			close(m.stop)
			<-m.done
		}
	}()
	p := newProposals()
	val := func(i int) []byte { return binary.AppendUvarint(nil, uint64(i)) }
	var first [][]byte
	for i := range 1000 {
		first = append(first, val(i))
	}
	p.proposeAll(t, ms, first)
	awaitApplied(t, ms, first)

	old := leaderOf(t, ms)
	for _, o := range c.nodes {
		if o != old.n {
			c.proxy(old.n, o).Cut()
			c.proxy(o, old.n).Cut()
		}
	}
	var oldErr error
	oldDone := make(chan struct{})
	old.call(func() {
		if err := old.g.Propose([]byte("minority"), func(err error) { oldErr = err; close(oldDone) }); err != nil {
			oldErr = err
			close(oldDone)
		}
	})
	rest := slices.DeleteFunc(slices.Clone(ms), func(m *member) bool { return m == old })
	var second [][]byte
	for i := 1000; i < 1100; i++ {
		second = append(second, val(i))
	}
	p.proposeAll(t, rest, second)
	newLead := leaderOf(t, rest)
	select {
	case <-oldDone:
	case <-time.After(2 * waitFor):
		t.Fatal("the cut-off leader's proposal neither failed nor was confirmed")
	}
	if oldErr == nil {
		t.Fatal("the cut-off leader confirmed a proposal")
	}
	t.Logf("leader %d cut off; %d took over; its proposal: %v", old.n.id, newLead.n.id, oldErr)
	// The new leader's heartbeats to the old one are dropped and reported
	// (replica.Group has no ReportUnreachable yet: the test counts them).
	newLead.n.mu.Lock()
	reported := newLead.n.unreach[[2]uint64{raftGroup, old.n.id}]
	newLead.n.mu.Unlock()
	if reported == 0 {
		t.Errorf("the new leader %d never reported the cut-off %d unreachable", newLead.n.id, old.n.id)
	}

	for _, pr := range c.proxies {
		pr.Pass()
	}
	awaitApplied(t, ms, slices.Concat(first, second))
	st.mu.Lock()
	defer st.mu.Unlock()
	counts := map[string]int{}
	for _, v := range ms[0].applied {
		counts[string(v)]++
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range slices.Concat(first, second) {
		switch n := counts[string(v)]; {
		case n == 0:
			t.Fatalf("confirmed value %x not applied", v)
		case n > 1 && p.failed[string(v)] == 0:
			t.Fatalf("value %x applied %d times, proposed once", v, n)
		}
	}
	if counts["minority"] > 0 {
		t.Fatal("the cut-off leader's value was applied")
	}
}

// awaitApplied waits until every member applied every value of vals,
// and checks that their applied sequences agree (each a prefix of the
// longest).
func awaitApplied(t *testing.T, ms []*member, vals [][]byte) {
	t.Helper()
	st := ms[0].st
	st.await(t, fmt.Sprintf("every member applied the %d values", len(vals)), func() bool {
		for _, m := range ms {
			have := map[string]bool{}
			for _, v := range m.applied {
				have[string(v)] = true
			}
			for _, v := range vals {
				if !have[string(v)] {
					return false
				}
			}
		}
		return true
	})
	st.mu.Lock()
	defer st.mu.Unlock()
	longest := ms[0].applied
	for _, m := range ms {
		if len(m.applied) > len(longest) {
			longest = m.applied
		}
	}
	for _, m := range ms {
		for i, v := range m.applied {
			if !slices.Equal(v, longest[i]) {
				t.Fatalf("member %d applied %x at %d, another member %x", m.n.id, v, i, longest[i])
			}
		}
	}
}
