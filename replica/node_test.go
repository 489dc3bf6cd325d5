package replica

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/brokerd/brokerd/replica/replicatest"
	pb "go.etcd.io/raft/v3/raftpb"
)

// mesh is an in-process network of nodes, each a member of every group;
// member ids are node numbers. Messages to a closed node are dropped.
type mesh struct {
	mu      sync.Mutex
	nodes   map[uint64]*Node
	down    map[uint64]bool
	applied map[[2]uint64][][]byte // (node, group) -> payloads applied
}

type meshTransport struct {
	m           *mesh
	from, group uint64
}

func (t meshTransport) Send(msgs []*pb.Message) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	if t.m.down[t.from] {
		return
	}
	for _, msg := range msgs {
		if to := msg.GetTo(); !t.m.down[to] {
			t.m.nodes[to].Step(t.group, msg)
		}
	}
}

func newMesh(t *testing.T, nodes, groups int) *mesh {
	t.Helper()
	m := &mesh{nodes: map[uint64]*Node{}, down: map[uint64]bool{}, applied: map[[2]uint64][][]byte{}}
	var ids []uint64
	for i := range nodes {
		ids = append(ids, uint64(i+1))
	}
	for _, id := range ids {
		// A 5 ms tick keeps elections quick; the test waits on events.
		m.nodes[id] = NewNode(NodeConfig{Tick: 5 * time.Millisecond})
		t.Cleanup(m.nodes[id].Close)
	}
	for _, id := range ids {
		for gi := range groups {
			group := uint64(gi + 1)
			key := [2]uint64{id, group}
			g, err := NewGroup(Config{
				ID: id, Peers: ids, ElectionTick: 10, HeartbeatTick: 1,
				Storage:   replicatest.NewMemLog(),
				Transport: meshTransport{m, id, group},
				Apply: func(_ uint64, payload []byte) {
					m.mu.Lock()
					m.applied[key] = append(m.applied[key], slices.Clone(payload))
					m.mu.Unlock()
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			m.nodes[id].Add(group, g)
		}
	}
	return m
}

// eventually polls cond every 5 ms (the mesh's tick) until it holds or 10
// s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// leader returns the node that leads group by its own account, 0 if none.
func (m *mesh) leader(group uint64) uint64 {
	for id, n := range m.nodes {
		if m.isDown(id) {
			continue
		}
		if lead, _ := n.Leader(group); lead == id {
			return id
		}
	}
	return 0
}

func (m *mesh) isDown(id uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.down[id]
}

func (m *mesh) appliedOf(node, group uint64) [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.applied[[2]uint64{node, group}])
}

// propose proposes count payloads to group at its leader from concurrent
// goroutines and returns each one's outcome.
func (m *mesh) propose(t *testing.T, group uint64, prefix string, count int) []error {
	t.Helper()
	var lead uint64
	eventually(t, fmt.Sprint("a leader of group ", group), func() bool { lead = m.leader(group); return lead != 0 })
	errs := make([]error, count)
	var wg sync.WaitGroup
	wg.Add(count)
	for i := range count {
		go m.nodes[lead].Propose(group, fmt.Appendf(nil, "%s-%d", prefix, i), func(err error) {
			errs[i] = err
			wg.Done()
		})
	}
	wg.Wait()
	return errs
}

// Three nodes, three groups: every proposal made at a group's leader is
// confirmed, and every node applies the same sequence of each group.
func TestNodeReplicatesGroups(t *testing.T) {
	m := newMesh(t, 3, 3)
	for group := uint64(1); group <= 3; group++ {
		for i, err := range m.propose(t, group, fmt.Sprint("g", group), 200) {
			if err != nil {
				t.Fatalf("group %d proposal %d: %v", group, i, err)
			}
		}
	}
	for group := uint64(1); group <= 3; group++ {
		eventually(t, fmt.Sprint("group ", group, " applied everywhere"), func() bool {
			ref := m.appliedOf(1, group)
			return len(ref) == 200 && slices.EqualFunc(ref, m.appliedOf(2, group), slices.Equal) &&
				slices.EqualFunc(ref, m.appliedOf(3, group), slices.Equal)
		})
	}
	for id, n := range m.nodes {
		if err := n.Err(); err != nil {
			t.Fatalf("node %d: %v", id, err)
		}
	}
}

// When the node leading a group stops, its proposals not applied fail
// with ErrClosed, and the two others elect a leader that confirms.
func TestNodeLeaderLoss(t *testing.T) {
	m := newMesh(t, 3, 2)
	for _, err := range m.propose(t, 1, "before", 50) {
		if err != nil {
			t.Fatal(err)
		}
	}
	lead := m.leader(1)
	m.mu.Lock()
	m.down[lead] = true
	m.mu.Unlock()
	failed := make(chan error, 1)
	m.nodes[lead].Propose(1, []byte("orphan"), func(err error) { failed <- err })
	m.nodes[lead].Close()
	if err := <-failed; err != ErrClosed && err != ErrLeadershipLost {
		t.Fatalf("a proposal at the stopped leader: %v, want ErrClosed", err)
	}
	eventually(t, "a new leader of group 1", func() bool { l := m.leader(1); return l != 0 && l != lead })
	for i, err := range m.propose(t, 1, "after", 50) {
		if err != nil {
			t.Fatalf("proposal %d after the leader stopped: %v", i, err)
		}
	}
	var live []uint64
	for id := range m.nodes {
		if id != lead {
			live = append(live, id)
		}
	}
	eventually(t, "the live nodes applied the same 100 entries", func() bool {
		a, b := m.appliedOf(live[0], 1), m.appliedOf(live[1], 1)
		return len(a) == 100 && slices.EqualFunc(a, b, slices.Equal)
	})
}

// failingLog is a MemLog whose Save fails once fail is set.
type failingLog struct {
	*replicatest.MemLog
	fail bool
}

func (l *failingLog) Save(hs *pb.HardState, ents []*pb.Entry) error {
	if l.fail {
		return fmt.Errorf("disk gone")
	}
	return l.MemLog.Save(hs, ents)
}

// A node whose group's log cannot be written stops, tells OnStop the
// failure (before its pending proposals fail), and says it in Err.
func TestNodeOnStop(t *testing.T) {
	stopped := make(chan error, 1)
	n := NewNode(NodeConfig{Tick: time.Millisecond, OnStop: func(err error) { stopped <- err }})
	defer n.Close()
	log := &failingLog{MemLog: replicatest.NewMemLog()}
	g, err := NewGroup(Config{ID: 1, Peers: []uint64{1}, ElectionTick: 10, HeartbeatTick: 1, Storage: log,
		Transport: meshTransport{m: &mesh{nodes: map[uint64]*Node{}, down: map[uint64]bool{1: true}}, from: 1, group: 1},
		Apply:     func(uint64, []byte) {}})
	if err != nil {
		t.Fatal(err)
	}
	n.Add(1, g)
	n.Campaign(1)
	done := make(chan error, 1)
	n.Run(func() { log.fail = true })
	n.Propose(1, []byte("x"), func(err error) { done <- err })
	err = <-stopped
	if err == nil || n.Err() == nil {
		t.Fatalf("OnStop got %v, Err %v", err, n.Err())
	}
	if perr := <-done; perr == nil {
		t.Fatal("a proposal of a stopped node succeeded")
	}
}
