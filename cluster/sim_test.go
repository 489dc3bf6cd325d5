package cluster

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/diskstore"
)

// The simulation: three members of the data group, each the real cluster
// code (Node.open's incarnation: the replicated disk store on its own
// crashable in-memory file system, the raft log in its WAL, the group,
// take and applied) driven by one loop instead of replica.Node, over a
// simulated network, with every choice — message delays and drops,
// partitions, crashes and the share of unsynced writes they keep,
// elections, the client's operations — drawn from one seed.
//
// The client, while a member serves, publishes (a put of a new message
// in queue 1) and moves (a dead-letter move: the delete from queue 1 and
// the put in queue 2 in one batch) through the serving member's store,
// as a broker would, and records what was confirmed (done without an
// error). At the end the network heals, the group settles, and every
// member's store must hold each confirmed publish exactly once, in one
// of the two queues, and nothing that was never published; all members
// the same.

const simQ1, simQ2 = store.QueueID(1), store.QueueID(2)

type simCluster struct {
	t     *testing.T
	rng   *rand.Rand
	now   int
	nodes []*simNode
	queue []simMsg
	cut   map[[2]uint64]bool
	drop  float64
	// unreachable are (from, to) pairs whose message was dropped, to
	// report to from's group.
	unreachable [][2]uint64
	delay       int

	nextSeq   uint64
	published map[uint64]bool // seqs whose publish was attempted
	confirmed map[uint64]bool // seqs whose publish was confirmed
	trace     []string        // what happened, to compare replays
}

type simMsg struct {
	at int
	m  *pb.Message
}

type simNode struct {
	name    string
	c       *Node
	fs      *vfs.MemFS
	inc     *incarnation
	alive   bool
	electAt int
	serving bool
}

func newSimCluster(t *testing.T, seed uint64) *simCluster {
	sc := &simCluster{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), cut: map[[2]uint64]bool{},
		published: map[uint64]bool{}, confirmed: map[uint64]bool{}, delay: 3}
	names := []string{"n1", "n2", "n3"}
	var peers []Peer
	for _, n := range names {
		peers = append(peers, Peer{Name: n})
	}
	for _, name := range names {
		n := &simNode{name: name, fs: vfs.NewCrashableMem()}
		c := &Node{log: quiet(), id: RaftID("sim", name), events: make(chan event, 16), joined: make(chan struct{}),
			simElections: true}
		// The log keeps everything: snapshots need the transport and
		// the supervisor, which the simulation does not run (a MsgSnap
		// fails the run: see step).
		c.cfg = Config{Cluster: "sim", Name: name, Peers: peers, Dir: "/data", ElectionTicks: 10, HeartbeatTicks: 1,
			Tick: time.Hour, Logger: quiet(), LogKeepBytes: 1 << 40,
			Store: diskstore.Options{FS: n.fs, Logger: quiet(), CheckpointInterval: time.Hour, CheckpointBytes: 1 << 30}}
		c.status.Store(&Status{})
		c.ops.init(c.cfg.Cluster, c.cfg.Peers)
		from := c.id
		c.send = func(_ uint64, msgs []*pb.Message) { sc.send(from, msgs) }
		n.c = c
		sc.nodes = append(sc.nodes, n)
	}
	for _, n := range sc.nodes {
		sc.start(n)
	}
	return sc
}

func (sc *simCluster) logf(format string, args ...any) {
	sc.trace = append(sc.trace, fmt.Sprintf("%d: ", sc.now)+fmt.Sprintf(format, args...))
}

func (sc *simCluster) start(n *simNode) {
	inc, err := n.c.open()
	if err != nil {
		sc.t.Fatalf("seed run: open %s: %v", n.name, err)
	}
	n.inc, n.alive, n.serving = inc, true, false
	n.electAt = sc.now + 10 + sc.rng.IntN(10)
	for len(n.c.events) > 0 {
		<-n.c.events
	}
}

func (sc *simCluster) send(from uint64, msgs []*pb.Message) {
	for _, m := range msgs {
		if sc.cut[[2]uint64{from, m.GetTo()}] || sc.rng.Float64() < sc.drop {
			// As the transport does: raft learns that the peer may
			// have missed it, and probes (at the next step: this runs
			// inside the sender's Ready).
			sc.unreachable = append(sc.unreachable, [2]uint64{from, m.GetTo()})
			continue
		}
		sc.queue = append(sc.queue, simMsg{at: sc.now + 1 + sc.rng.IntN(sc.delay), m: m})
	}
}

func (sc *simCluster) byID(id uint64) *simNode {
	for _, n := range sc.nodes {
		if n.c.id == id {
			return n
		}
	}
	return nil
}

// crash kills n: its file system keeps what was synced and a random share
// of what was not; it starts again from that.
func (sc *simCluster) crash(n *simNode) {
	share := sc.rng.IntN(101)
	clone := n.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: share, RNG: rand.New(rand.NewPCG(sc.rng.Uint64(), 1))})
	n.alive = false
	n.c.closeIncarnation(n.inc, false)
	n.inc = nil
	n.fs = clone
	n.c.cfg.Store.FS = clone
	sc.logf("crash %s keeping %d%% of unsynced writes", n.name, share)
}

// step runs one tick of the simulation.
func (sc *simCluster) step(client bool) {
	sc.now++
	due := sc.queue[:0:0]
	var rest []simMsg
	for _, m := range sc.queue {
		if m.at <= sc.now {
			due = append(due, m)
		} else {
			rest = append(rest, m)
		}
	}
	sc.queue = rest
	for _, m := range due {
		if m.m.GetType() == pb.MsgSnap {
			sc.t.Fatalf("a snapshot sent in the simulation (its log should keep everything): %v", m.m)
		}
		if n := sc.byID(m.m.GetTo()); n != nil && n.alive {
			_ = n.inc.g.Step(m.m)
		} else {
			sc.unreachable = append(sc.unreachable, [2]uint64{m.m.GetFrom(), m.m.GetTo()})
		}
	}
	for _, u := range sc.unreachable {
		if n := sc.byID(u[0]); n != nil && n.alive {
			n.inc.g.ReportUnreachable(u[1])
		}
	}
	sc.unreachable = sc.unreachable[:0]
	for _, n := range sc.nodes {
		if !n.alive {
			continue
		}
		n.inc.g.Tick()
		sc.elect(n)
		sc.process(n)
	}
	if client {
		sc.client()
		for _, n := range sc.nodes {
			if n.alive {
				sc.process(n)
			}
		}
	}
}

// elect campaigns for n when it hears from no leader it can reach and its
// (seeded) timeout passed.
func (sc *simCluster) elect(n *simNode) {
	lead, _ := n.inc.g.Leader()
	if l := sc.byID(lead); l != nil && l.alive && !sc.cut[[2]uint64{lead, n.c.id}] {
		if lead != n.c.id {
			n.electAt = sc.now + 10 + sc.rng.IntN(10)
		}
		return
	}
	if sc.now >= n.electAt {
		_ = n.inc.g.Campaign()
		n.electAt = sc.now + 10 + sc.rng.IntN(10)
		sc.logf("%s campaigns", n.name)
	}
}

// process runs n's group until it has nothing ready, as the node's loop
// would, then handles its events: serving starts, or the store reopens.
func (sc *simCluster) process(n *simNode) {
	for {
		if n.inc.woken.Load() {
			n.c.take(n.inc)
		}
		ok, err := n.inc.g.Process()
		if err != nil {
			sc.t.Fatalf("%s: %v", n.name, err)
		}
		if !ok && !n.inc.woken.Load() {
			break
		}
	}
	n.c.afterCycle(n.inc)
	for len(n.c.events) > 0 {
		ev := <-n.c.events
		if ev.ready {
			n.serving = true
			sc.logf("%s serves in term %d", n.name, ev.term)
			continue
		}
		sc.logf("%s lost leadership in term %d; reopens", n.name, ev.term)
		n.serving = false
		n.c.closeIncarnation(n.inc, false)
		n.inc = nil
		sc.start(n)
	}
}

// client does what a broker on the serving member would: a few publishes
// and moves through its store.
func (sc *simCluster) client() {
	var srv *simNode
	for _, n := range sc.nodes {
		if n.alive && n.serving {
			srv = n
		}
	}
	if srv == nil {
		return
	}
	st := srv.inc.st
	for range sc.rng.IntN(4) {
		if sc.rng.IntN(3) > 0 {
			sc.nextSeq++
			seq := sc.nextSeq
			m := &store.Message{ID: st.AllocMsgID(), Body: []byte(strconv.FormatUint(seq, 10)), Persistent: true}
			sc.published[seq] = true
			st.Apply(&store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: simQ1, Seq: seq}, Msg: m}}},
				func(err error) {
					if err == nil {
						sc.confirmed[seq] = true
					}
				})
			continue
		}
		// A move of an entry this store holds in queue 1.
		var e *store.Entry
		_ = st.ScanQueue(simQ1, uint64(sc.rng.IntN(int(sc.nextSeq)+1)), func(x *store.Entry) bool {
			c := *x
			e = &c
			return false
		})
		if e == nil {
			continue
		}
		st.Apply(&store.Batch{Deletes: []store.Ref{e.Ref}, Puts: []store.Entry{{Ref: store.Ref{Queue: simQ2, Seq: e.Seq}, Msg: &store.Message{ID: e.Msg.ID}}}}, nil)
	}
}

// partition applies a seeded fault to the network.
func (sc *simCluster) fault() {
	ids := []uint64{sc.nodes[0].c.id, sc.nodes[1].c.id, sc.nodes[2].c.id}
	switch k := sc.rng.IntN(8); k {
	case 0: // heal
		clear(sc.cut)
		sc.drop = 0
		sc.logf("heal")
	case 1: // 2|1
		lone := ids[sc.rng.IntN(3)]
		for _, o := range ids {
			if o != lone {
				sc.cut[[2]uint64{lone, o}], sc.cut[[2]uint64{o, lone}] = true, true
			}
		}
		sc.logf("isolate %x", lone)
	case 2: // 1|1|1
		for _, a := range ids {
			for _, b := range ids {
				if a != b {
					sc.cut[[2]uint64{a, b}] = true
				}
			}
		}
		sc.logf("split all")
	case 3: // one way
		a, b := ids[sc.rng.IntN(3)], ids[sc.rng.IntN(3)]
		if a != b {
			sc.cut[[2]uint64{a, b}] = true
			sc.logf("one way %x->%x", a, b)
		}
	case 4: // lossy
		sc.drop = 0.2
		sc.logf("drop 20%%")
	case 5, 6: // crash one
		n := sc.nodes[sc.rng.IntN(3)]
		if n.alive {
			sc.crash(n)
		}
	case 7: // a follower checkpoints (a leader's would wait for commits)
		n := sc.nodes[sc.rng.IntN(3)]
		if n.alive && !n.serving {
			if err := n.inc.st.Checkpoint(); err != nil {
				sc.t.Fatalf("%s: checkpoint: %v", n.name, err)
			}
			sc.logf("%s checkpoints", n.name)
		}
	}
	for _, n := range sc.nodes {
		if !n.alive && sc.rng.IntN(2) == 0 {
			sc.start(n)
			sc.logf("restart %s", n.name)
		}
	}
}

// settle heals everything and runs until every member applied all the
// leader committed and no proposal is left.
func (sc *simCluster) settle() {
	clear(sc.cut)
	sc.drop = 0
	for _, n := range sc.nodes {
		if !n.alive {
			sc.start(n)
		}
	}
	for i := 0; i < 5000; i++ {
		sc.step(false)
		if sc.settled() {
			return
		}
	}
	var st []string
	for _, n := range sc.nodes {
		rs := n.inc.g.Status()
		a, _ := n.inc.st.Applied()
		st = append(st, fmt.Sprintf("%s: %s term %d commit %d applied %d (store %d) serving %v", n.name, rs.RaftState, rs.GetTerm(), rs.GetCommit(), rs.Applied, a, n.serving))
	}
	sc.t.Fatalf("the group did not settle:\n%s", fmtLines(st))
}

func (sc *simCluster) settled() bool {
	var commit uint64
	for _, n := range sc.nodes {
		if n.serving {
			// Settled when the leader has nothing uncommitted: its own
			// log ends at the commit index.
			rs := n.inc.g.Status()
			if pr, ok := rs.Progress[n.c.id]; !ok || pr.Match != rs.GetCommit() || n.inc.woken.Load() {
				return false
			}
			commit = rs.GetCommit()
		}
	}
	if commit == 0 {
		return false
	}
	for _, n := range sc.nodes {
		if a, _ := n.inc.st.Applied(); a != commit {
			return false
		}
	}
	return true
}

func fmtLines(s []string) string {
	out := ""
	for _, l := range s {
		out += l + "\n"
	}
	return out
}

// check compares every member's store with what the client was told.
func (sc *simCluster) check() string {
	var first string
	for _, n := range sc.nodes {
		seen := map[uint64]store.QueueID{}
		var dup []uint64
		for _, q := range []store.QueueID{simQ1, simQ2} {
			var ids []store.MsgID
			var seqs []uint64
			if err := n.inc.st.ScanQueue(q, 0, func(e *store.Entry) bool {
				ids = append(ids, e.Msg.ID)
				seqs = append(seqs, e.Seq)
				return true
			}); err != nil {
				sc.t.Fatal(err)
			}
			bodies := make([]string, len(ids))
			if err := n.inc.st.LoadMessages(ids, func(i int, m *store.Message) { bodies[i] = string(m.Body) }); err != nil {
				sc.t.Fatalf("%s: %v", n.name, err)
			}
			for i, seq := range seqs {
				if bodies[i] != strconv.FormatUint(seq, 10) {
					sc.t.Fatalf("%s: queue %d seq %d holds %q", n.name, q, seq, bodies[i])
				}
				if _, ok := seen[seq]; ok {
					dup = append(dup, seq)
				}
				seen[seq] = q
			}
		}
		var lost, phantom []uint64
		for seq := range sc.confirmed {
			if _, ok := seen[seq]; !ok {
				lost = append(lost, seq)
			}
		}
		for seq := range seen {
			if !sc.published[seq] {
				phantom = append(phantom, seq)
			}
		}
		slices.Sort(lost)
		if len(lost)+len(phantom)+len(dup) > 0 {
			sc.t.Fatalf("%s: lost %v, phantom %v, in two queues %v (%d confirmed)\ntrace:\n%s", n.name, lost, phantom, dup,
				len(sc.confirmed), fmtLines(sc.trace[max(0, len(sc.trace)-60):]))
		}
		keys := make([]uint64, 0, len(seen))
		for k := range seen {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		sum := fmt.Sprint(len(keys))
		for _, k := range keys {
			sum += fmt.Sprintf(",%d:%d", k, seen[k])
		}
		if first == "" {
			first = sum
		} else if sum != first {
			a, b := strings.Split(first, ","), strings.Split(sum, ",")
			am := map[string]bool{}
			for _, x := range a[1:] {
				am[x] = true
			}
			var only []string
			for _, x := range b[1:] {
				if !am[x] {
					only = append(only, x)
				}
				delete(am, x)
			}
			for x := range am {
				only = append(only, "n1 only:"+x)
			}
			slices.Sort(only)
			for _, n := range sc.nodes {
				rs := n.inc.g.Status()
				ap, _ := n.inc.st.Applied()
				sc.t.Logf("%s: %s term %d commit %d applied %d (store %d) serving %v woken %v stats %+v last %v", n.name, rs.RaftState, rs.GetTerm(), rs.GetCommit(), rs.Applied, ap, n.serving, n.inc.woken.Load(), n.inc.g.Stats(), rs.Progress)
			}
			sc.t.Logf("differences: %v; confirmed? %v", only, sc.confirmed)
			sc.t.Fatalf("%s's store differs from n1's:\n%s\n%s\ntrace:\n%s", n.name, first, sum, fmtLines(sc.trace[max(0, len(sc.trace)-60):]))
		}
	}
	return first
}

func (sc *simCluster) close() {
	for _, n := range sc.nodes {
		if n.alive {
			n.c.closeIncarnation(n.inc, false)
		}
	}
}

// runSim runs one seed's schedule and returns a digest of what happened.
func runSim(t *testing.T, seed uint64, steps int) (digest uint64, confirmed int) {
	sc := newSimCluster(t, seed)
	defer sc.close()
	for i := 0; i < steps; i++ {
		if sc.rng.IntN(60) == 0 {
			sc.fault()
		}
		sc.step(true)
	}
	sc.settle()
	final := sc.check()
	h := fnv.New64a()
	for _, l := range sc.trace {
		h.Write([]byte(l))
	}
	h.Write([]byte(final))
	return h.Sum64(), len(sc.confirmed)
}

// simSeeds is how many seeds TestClusterSimulation runs: a few in CI,
// BROKERD_CLUSTER_SIM_SEEDS=N for more; BROKERD_CLUSTER_SIM_SEED=x runs
// that one.
func simSeeds(t *testing.T) []uint64 {
	if s := os.Getenv("BROKERD_CLUSTER_SIM_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return []uint64{v}
	}
	n := 4
	if s := os.Getenv("BROKERD_CLUSTER_SIM_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		n = v
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}

// Seeded schedules of partitions, lossy links, crashes that keep a random
// share of unsynced writes, and checkpoints, under a client publishing
// and moving messages: no confirmed publish is lost, none is in two
// queues, nothing unpublished appears, and the members agree.
func TestClusterSimulation(t *testing.T) {
	total := 0
	for _, seed := range simSeeds(t) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			_, n := runSim(t, seed, 1500)
			total += n
		})
	}
	t.Logf("%d confirmed publishes checked", total)
}

// A seed's schedule replays exactly: the same trace and final state.
func TestClusterSimulationReplays(t *testing.T) {
	a, _ := runSim(t, 42, 600)
	b, _ := runSim(t, 42, 600)
	if a != b {
		t.Fatalf("seed 42 ran twice gave digests %x and %x", a, b)
	}
}
